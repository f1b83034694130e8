"""The key rule of agentrl.credentials: $OPENAI_API_KEY only to OpenAI's own API, else explicit or a placeholder."""

from __future__ import annotations

import os

import pytest

from agentrl.credentials import PLACEHOLDER_KEY, explicit_key, is_openai_api, key_for, litellm_key
from agentrl.errors import ConfigError

# REAL is in the environment as $OPENAI_API_KEY for every test of this module.
from tests.openai_key import REAL, real_openai_key_in_env  # noqa: F401


@pytest.fixture(scope="module")
def litellm():
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from agentrl.judge.client import load_litellm

    return load_litellm()


OPENAI = ["https://api.openai.com/v1", "https://api.openai.com", "https://API.openai.com:443/v1/"]
OTHERS = [
    "http://api.openai.com/v1",  # not https
    "https://api.openai.com:8443/v1",
    "https://api.openai.com.evil.example/v1",
    "https://evil.example/api.openai.com/v1",
    "https://evil.example/?h=https://api.openai.com",
    "https://api.openai.com@evil.example/v1",  # userinfo: the host is evil.example
    "http://127.0.0.1:8000/v1",
    "https://openai.com/v1",
    "not a url",
]


@pytest.mark.parametrize("base", OPENAI)
def test_openai_api_gets_the_env_key(base):
    assert is_openai_api(base)
    assert key_for(base) == REAL
    assert key_for(base, "sk-explicit") == "sk-explicit"


@pytest.mark.parametrize("base", OTHERS)
def test_any_other_server_gets_only_an_explicit_key_or_the_placeholder(base):
    assert not is_openai_api(base)
    assert key_for(base) == PLACEHOLDER_KEY != REAL
    assert key_for(base, "sk-explicit") == "sk-explicit"


def test_openai_api_without_env_key_sends_none(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    assert key_for("https://api.openai.com/v1") is None


def test_explicit_key_from_a_named_variable(monkeypatch):
    monkeypatch.setenv("MY_SERVER_KEY", "sk-mine")
    assert explicit_key(None, "MY_SERVER_KEY") == "sk-mine"
    assert explicit_key("sk-flag", "MY_SERVER_KEY") == "sk-flag"
    assert explicit_key(None, None) is None
    with pytest.raises(ConfigError, match="--api-key-env: the environment variable NOPE_KEY is not set"):
        explicit_key(None, "NOPE_KEY")


def test_litellm_key_follows_where_litellm_sends(litellm, monkeypatch):
    # An explicit base: the rule of key_for, whatever the provider.
    assert litellm_key(litellm, "openai/m", "http://127.0.0.1:8000/v1") == PLACEHOLDER_KEY
    assert litellm_key(litellm, "anthropic/claude-x", "http://127.0.0.1:8000/v1") == PLACEHOLDER_KEY
    assert litellm_key(litellm, "openai/m", "https://api.openai.com/v1") == REAL
    assert litellm_key(litellm, "openai/m", "http://127.0.0.1:8000/v1", "sk-x") == "sk-x"
    # No base: OpenAI models go to OpenAI (litellm picks the env key itself), others to their own API.
    assert litellm_key(litellm, "openai/m", None) is None
    assert litellm_key(litellm, "gpt-4o", None) is None
    assert litellm_key(litellm, "anthropic/claude-x", None) is None
    # ... unless the environment points OpenAI clients elsewhere: then no real key follows.
    monkeypatch.setenv("OPENAI_BASE_URL", "http://10.0.0.5:8000/v1")
    assert litellm_key(litellm, "openai/m", None) == PLACEHOLDER_KEY
    assert litellm_key(litellm, "gpt-4o", None) == PLACEHOLDER_KEY
    assert litellm_key(litellm, "anthropic/claude-x", None) is None
    monkeypatch.delenv("OPENAI_BASE_URL")
    monkeypatch.setenv("OPENAI_API_BASE", "https://api.openai.com/v1")
    assert litellm_key(litellm, "openai/m", None) == REAL
