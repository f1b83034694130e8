"""Policies (layer 2): produce assistant turns, with TITO data where the backend samples tokens.

``make_policy("oracle", noise=0.1)`` or ``make_policy("openai:MODEL", api_base=...)``. The ``hf``
policy (transformers generate) lives with the trainer, which owns torch.
"""

from __future__ import annotations

from typing import Any

from agentrl.errors import ConfigError
from agentrl.policy.base import EpisodeContext, Policy
from agentrl.policy.oracle import OraclePolicy

__all__ = ["EpisodeContext", "OraclePolicy", "Policy", "make_policy"]


def make_policy(spec: str, **kwargs: Any) -> Policy:
    """A policy from a CLI spec: ``oracle``, ``openai:MODEL`` or ``litellm:MODEL``.

    Keyword arguments go to the policy's constructor (``noise`` for the oracle; ``api_base``,
    ``api_key``, ``temperature``, ``max_tokens``, ``concurrency`` for openai); None values are dropped.
    """
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    kind, _, model = spec.partition(":")
    if kind == "oracle":
        allowed = {"noise", "style"}
        return OraclePolicy(**{k: v for k, v in kwargs.items() if k in allowed})
    if kind == "openai":
        if not model:
            raise ConfigError("--policy: openai needs a model name, as openai:MODEL")
        from agentrl.policy.openai import OpenAIPolicy

        allowed = {
            "api_base",
            "api_key",
            "temperature",
            "max_tokens",
            "timeout_s",
            "retries",
            "logprobs",
            "top_p",
        }
        return OpenAIPolicy(model, **{k: v for k, v in kwargs.items() if k in allowed})
    if kind == "litellm":
        if not model:
            raise ConfigError("--policy: litellm needs a model name, as litellm:MODEL")
        from agentrl.policy.litellm_policy import LiteLLMPolicy

        allowed = {
            "api_base",
            "api_key",
            "temperature",
            "max_tokens",
            "timeout_s",
            "retries",
            "top_p",
            "send_tools",
        }
        return LiteLLMPolicy(model, **{k: v for k, v in kwargs.items() if k in allowed})
    raise ConfigError(f"--policy: unknown policy {spec!r}; expected oracle, openai:MODEL or litellm:MODEL")
