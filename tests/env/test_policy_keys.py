"""Keys the openai and litellm policies send (issue #17), against local servers that record headers."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest

from agentrl.cli import main
from agentrl.policy import EpisodeContext, make_policy
from agentrl.policy.openai import PolicyError
from agentrl.trajectory import Message
from tests.judge.fake_server import chat_completion
from tests.local_http import RecordingServer

# REAL is in the environment as $OPENAI_API_KEY for every test of this module.
from tests.openai_key import REAL, real_openai_key_in_env  # noqa: F401

from .openai_server import FakeChatServer


@pytest.fixture
def server():
    s = FakeChatServer()
    yield s
    s.close()


def _act(spec: str, **kw) -> Message:
    async def go():
        p = make_policy(spec, retries=0, **kw)
        try:
            return await p.act(
                [Message(role="user", content="hi")], EpisodeContext(task_id="t", date="2025-01-01", seed=0)
            )
        finally:
            await p.aclose()

    return asyncio.run(go())


@pytest.mark.parametrize("spec", ["openai:tiny", "litellm:openai/tiny"])
def test_local_server_never_gets_openai_api_key(server, spec):
    _act(spec, api_base=server.base)
    _act(spec, api_base=server.base, api_key="sk-for-this-server")
    assert server.authorization == ["Bearer sk-local", "Bearer sk-for-this-server"]


@pytest.mark.parametrize("spec", ["openai:tiny", "litellm:openai/tiny"])
def test_base_from_the_environment_gets_no_real_key_either(server, spec, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", server.base)
    _act(spec)
    assert server.authorization == ["Bearer sk-local"]


def test_litellm_local_server_without_any_key_works(server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")  # litellm would fail with "Missing credentials"
    assert "<tool_call>" in _act("litellm:openai/tiny", api_base=server.base).text
    assert server.authorization == ["Bearer sk-local"]


def _chat_reply(path: str):
    return (
        200,
        {"Content-Type": "application/json"},
        json.dumps(chat_completion(1, "tiny", "hi", "")).encode(),
    )


@pytest.mark.parametrize("spec", ["openai:tiny", "litellm:openai/tiny"])
def test_a_redirect_to_another_host_carries_no_key(spec):
    other = RecordingServer(_chat_reply)
    hop = RecordingServer(lambda path: (307, {"Location": other.url + path}, b""))
    try:
        with contextlib.suppress(PolicyError):  # the openai policy follows no redirect at all
            _act(spec, api_base=hop.url + "/v1", api_key="sk-explicit")
        assert hop.header("authorization") == ["Bearer sk-explicit"]
        # litellm (the OpenAI SDK over httpx) follows it, without the key
        assert other.header("authorization") == ([None] if spec.startswith("litellm") else [])
    finally:
        hop.close()
        other.close()


@pytest.mark.parametrize("status", [401, 403])
@pytest.mark.parametrize("spec", ["openai:tiny", "litellm:openai/tiny"])
def test_refused_key_is_not_retried(spec, status):
    body = json.dumps({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}})
    s = RecordingServer(lambda path: (status, {"Content-Type": "application/json"}, body.encode()))
    try:

        async def go():
            p = make_policy(spec, api_base=s.url + "/v1", retries=3)
            try:
                await p.act(
                    [Message(role="user", content="hi")],
                    EpisodeContext(task_id="t", date="2025-01-01", seed=0),
                )
            finally:
                await p.aclose()

        with pytest.raises(PolicyError):
            asyncio.run(go())
        assert len(s.requests) == 1
    finally:
        s.close()


def test_rollout_cli_key_flags(server, small_suite, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MY_SERVER_KEY", "sk-from-named-env")
    argv = ["rollout", "--suite", str(small_suite), "--policy", "openai:tiny", "--api-base", server.base]
    argv += [
        "--limit",
        "1",
        "--no-progress",
        "--out",
        str(tmp_path / "t.jsonl"),
        "--api-key-env",
        "MY_SERVER_KEY",
    ]
    assert main(argv) == 0
    assert set(server.authorization) == {"Bearer sk-from-named-env"}
    assert main([*argv[:-1], "UNSET_KEY_VAR"]) != 0
    assert "UNSET_KEY_VAR is not set" in capsys.readouterr().err
