"""Which API key a request to a model server may carry: the one owner of that rule.

``$OPENAI_API_KEY`` goes only to OpenAI's own API (``https://api.openai.com``, default port). A
request to any other base URL — a local vLLM, a proxy, whatever ``--api-base`` or
``$OPENAI_BASE_URL`` names — carries only a key given for it explicitly (``api_key``, or the
environment variable named by ``--api-key-env``), else ``PLACEHOLDER_KEY``: servers without auth
accept any key, and the OpenAI SDK under litellm refuses to send none ("Missing credentials").
The openai policy, the litellm policy and the judge all pick their key here.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

from agentrl.errors import ConfigError

__all__ = [
    "OPENAI_KEY_ENV",
    "PLACEHOLDER_KEY",
    "env_base_url",
    "explicit_key",
    "is_openai_api",
    "key_for",
    "litellm_key",
]

OPENAI_KEY_ENV = "OPENAI_API_KEY"
PLACEHOLDER_KEY = "sk-local"
_OPENAI_HOST = "api.openai.com"
# litellm providers that read $OPENAI_API_KEY and $OPENAI_BASE_URL / $OPENAI_API_BASE.
_OPENAI_PROVIDERS = {"openai", "text-completion-openai"}


def is_openai_api(base_url: str) -> bool:
    """True when ``base_url`` is OpenAI's own API: https, host ``api.openai.com``, port 443."""
    parts = urlsplit(base_url.strip())
    try:
        port = parts.port
    except ValueError:
        return False
    return parts.scheme == "https" and parts.hostname == _OPENAI_HOST and port in (None, 443)


def env_base_url() -> str | None:
    """The base URL the environment gives OpenAI clients (``$OPENAI_BASE_URL``, else ``$OPENAI_API_BASE``)."""
    return os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_BASE") or None


def explicit_key(api_key: str | None = None, api_key_env: str | None = None) -> str | None:
    """The key the user gave for this server: ``api_key``, else ``$api_key_env`` (which must be set)."""
    if api_key:
        return api_key
    if api_key_env:
        value = os.environ.get(api_key_env)
        if not value:
            raise ConfigError(f"--api-key-env: the environment variable {api_key_env} is not set")
        return value
    return None


def key_for(base_url: str, api_key: str | None = None) -> str | None:
    """The key a request to ``base_url`` carries.

    ``api_key`` (explicit) wins; otherwise ``$OPENAI_API_KEY`` for OpenAI's own API (None when it
    is unset) and ``PLACEHOLDER_KEY`` for every other server.
    """
    if api_key:
        return api_key
    if is_openai_api(base_url):
        return os.environ.get(OPENAI_KEY_ENV) or None
    return PLACEHOLDER_KEY


def litellm_key(litellm: Any, model: str, api_base: str | None, api_key: str | None = None) -> str | None:
    """The ``api_key`` to pass to ``litellm.acompletion(model=model, api_base=api_base)``; None: let litellm pick.

    With ``api_base`` the rule of ``key_for`` applies to it. Without, an OpenAI model goes where
    ``$OPENAI_BASE_URL`` / ``$OPENAI_API_BASE`` point (litellm reads them), else to OpenAI; any
    other provider goes to its own API with its own key (None: litellm's default).
    """
    if api_key:
        return api_key
    if api_base:
        return key_for(api_base)
    try:
        provider = litellm.get_llm_provider(model=model)[1]
    except Exception:  # an unknown model: litellm's own call reports it
        return None
    if provider in _OPENAI_PROVIDERS:
        base = env_base_url()
        return key_for(base) if base else None
    return None
