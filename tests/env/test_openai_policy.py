"""The openai policy against a local OpenAI-compatible server: TITO data, fallback, retries, rollouts."""

from __future__ import annotations

import asyncio

import pytest

from agentrl.errors import ConfigError
from agentrl.policy import EpisodeContext, make_policy
from agentrl.policy.openai import PolicyError
from agentrl.rollout import run_rollout
from agentrl.trajectory import Message, read_trajectories

from .openai_server import FakeChatServer


@pytest.fixture
def server():
    s = FakeChatServer()
    yield s
    s.close()


def _ctx():
    return EpisodeContext(task_id="t", date="2025-01-01", seed=0)


def test_turn_carries_token_ids_and_logprobs(server):
    async def go():
        p = make_policy("openai:tiny", api_base=server.base, temperature=0.7)
        msg = await p.act([Message(role="user", content="hi")], _ctx())
        await p.aclose()
        return msg

    msg = asyncio.run(go())
    assert "<tool_call>" in msg.text and msg.finish_reason == "stop"
    assert msg.token_ids == list(range(100, 107)) and len(msg.logprobs) == 7
    req = server.requests[0]
    assert req["logprobs"] is True and req["return_token_ids"] is True and req["temperature"] == 0.7


def test_server_without_vllm_extensions_falls_back(tmp_path):
    s = FakeChatServer(tito=False)
    try:

        async def go():
            p = make_policy("openai:tiny", api_base=s.base)
            a = await p.act([Message(role="user", content="hi")], _ctx())
            b = await p.act([Message(role="user", content="hi")], _ctx())
            await p.aclose()
            return a, b

        a, b = asyncio.run(go())
        assert a.token_ids is None and b.token_ids is None and "<tool_call>" in a.text
        assert len(s.requests) == 3  # one rejected, then remembered
    finally:
        s.close()


def test_unreachable_server_fails_after_bounded_retries():
    async def go():
        p = make_policy("openai:tiny", api_base="http://127.0.0.1:9/v1", retries=1, timeout_s=2)
        try:
            await p.act([Message(role="user", content="hi")], _ctx())
        finally:
            await p.aclose()

    with pytest.raises(PolicyError, match="2 tries"):
        asyncio.run(go())


def test_missing_api_base_is_a_config_error(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)
    with pytest.raises(ConfigError, match="api_base"):
        make_policy("openai:tiny")
    with pytest.raises(ConfigError, match="make_policy builds chat policies only; load hf:PATH with"):
        make_policy("hf:tiny")


def test_rollout_with_openai_policy_stores_tito(server, small_suite, tmp_path):
    out = tmp_path / "t.jsonl"
    policy = make_policy("openai:tiny", api_base=server.base)
    s = asyncio.run(run_rollout({"suite": str(small_suite)}, policy, out, n=2, concurrency=4, limit=3))
    assert s.episodes == 6 and s.failed == 0
    for t in read_trajectories(out):
        assistants = [m for m in t.messages if m.role == "assistant"]
        assert len(assistants) == 2 and all(
            m.token_ids and len(m.logprobs) == len(m.token_ids) for m in assistants
        )
        assert t.reward is not None and t.info["terminated"]
        assert t.final_report().startswith("Revenue was")
    # the second request replays the first turn as text only (no duplicated tool_calls)
    second = next(r for r in server.requests if any(m["role"] == "assistant" for m in r["messages"]))
    assistant = next(m for m in second["messages"] if m["role"] == "assistant")
    assert "tool_calls" not in assistant and "<tool_call>" in assistant["content"]


def test_litellm_policy_against_a_local_server(server):
    async def go():
        p = make_policy("litellm:openai/tiny", api_base=server.base, api_key="local", retries=0)
        msg = await p.act([Message(role="user", content="hi")], _ctx())
        await p.aclose()
        return msg

    msg = asyncio.run(go())
    assert "<tool_call>" in msg.text and msg.token_ids is None
    assert server.requests[-1]["model"] == "tiny"
