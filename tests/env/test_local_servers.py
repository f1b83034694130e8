"""The policy against local stand-ins of each server family (issue #17): how log-probs and token ids
come back, the no-token-id count, context overflow as a truncated episode, and ``tools`` in requests."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from agentrl.cli import main
from agentrl.policy import EpisodeContext, make_policy
from agentrl.policy.server_reply import CONTEXT_OVERFLOW, is_context_overflow, read_tito
from agentrl.rollout import run_rollout
from agentrl.trajectory import Message, read_trajectories

from .openai_server import OVERFLOW, FakeChatServer


def _ctx(**kw):
    return EpisodeContext(task_id="t", date="2025-01-01", seed=0, **kw)


def _two_turns(spec: str, base: str, **kw) -> list[Message]:
    async def go():
        p = make_policy(spec, api_base=base, retries=0, **kw)
        try:
            a = await p.act([Message(role="user", content="hi")], _ctx())
            b = await p.act([Message(role="user", content="hi"), a], _ctx())
            return [a, b]
        finally:
            await p.aclose()

    return asyncio.run(go())


@pytest.fixture
def serve():
    servers: list[FakeChatServer] = []

    def make(**kw) -> FakeChatServer:
        servers.append(FakeChatServer(**kw))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def test_llamacpp_logprobs_need_top_logprobs_and_give_no_ids(serve, caplog):
    s = serve(family="llamacpp")
    with caplog.at_level(logging.WARNING, logger="agentrl.policy"):
        turns = _two_turns("openai:tiny", s.base)
    req = s.requests[0]
    assert req["logprobs"] is True and req["top_logprobs"] == 1
    assert all(r.get("logprobs") for r in s.replies)  # the server did return log-probs ...
    assert all(t.token_ids is None and t.logprobs is None for t in turns)  # ... but never ids: none stored
    notes = [r.getMessage() for r in caplog.records if "token ids" in r.getMessage()]
    assert len(notes) == 1 and "retokenized" in notes[0] and "log-probs but no token ids" in notes[0]


@pytest.mark.parametrize("family", ["vllm", "llama_server"])
def test_token_ids_read_where_the_server_puts_them(serve, family, caplog):
    s = serve(family=family)
    with caplog.at_level(logging.WARNING, logger="agentrl.policy"):
        a, b = _two_turns("openai:tiny", s.base)
    assert a.token_ids == list(range(100, 107)) and b.token_ids == list(range(100, 108))
    assert a.logprobs == pytest.approx([-0.1 * (k + 1) for k in range(7)])
    assert s.requests[0]["return_token_ids"] is True
    assert not [r for r in caplog.records if "token ids" in r.getMessage()]


def test_three_id_shapes_read_the_same():
    """vLLM's ``token_ids``, per-entry ``id``s and ``token_id:N`` strings: one reader, one answer."""
    ids, lps = [5, 17, 2], [-0.5, -1.0, -0.25]
    shapes = [
        {"token_ids": ids, "logprobs": {"content": [{"token": "x", "logprob": lp} for lp in lps]}},
        {
            "logprobs": {
                "content": [{"token": "x", "id": i, "logprob": lp} for i, lp in zip(ids, lps, strict=True)]
            }
        },
        {
            "logprobs": {
                "content": [
                    {"token": "x", "token_id": i, "logprob": lp} for i, lp in zip(ids, lps, strict=True)
                ]
            }
        },
        {
            "logprobs": {
                "content": [{"token": f"token_id:{i}", "logprob": lp} for i, lp in zip(ids, lps, strict=True)]
            }
        },
    ]
    assert all(read_tito(c) == (ids, lps) for c in shapes)
    # one entry without an id: no ids at all (never a guess), and so no log-probs either
    partial = {
        "logprobs": {"content": [{"token": "x", "id": 5, "logprob": -1.0}, {"token": "y", "logprob": -2.0}]}
    }
    assert read_tito(partial) == (None, None)
    assert read_tito({"token_ids": ids, "logprobs": {"content": [{"logprob": -1.0}]}}) == (ids, None)


@pytest.mark.parametrize(("family", "without"), [("vllm", 0), ("llamacpp", 2), ("plain", 2)])
def test_rollout_summary_counts_turns_without_token_ids(
    serve, small_suite, tmp_path, capsys, family, without
):
    s = serve(family=family)
    out = tmp_path / "t.jsonl"
    argv = ["rollout", "--suite", str(small_suite), "--policy", "openai:tiny", "--api-base", s.base]
    assert main([*argv, "--limit", "1", "--no-progress", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out.strip().splitlines()[-1])
    assert summary["sampled_turns"] == 2 and summary["turns_without_token_ids"] == without
    (t,) = read_trajectories(out)
    stored = [m for m in t.messages if m.role == "assistant"]
    assert sum(m.token_ids is None for m in stored) == without
    # vLLM reports the prompt it fed: the first turn's is kept for the expander, no message keeps any
    assert t.info.get("prompt_token_ids") == (list(range(1000, 1020)) if family == "vllm" else None)
    assert not any("prompt_token_ids" in m.model_dump() for m in t.messages)
    human = " ".join(captured.err.split())  # the console wraps long lines
    assert ("2/2 sampled turns without token ids" in human) == bool(without)


@pytest.mark.parametrize("style", sorted(OVERFLOW))
def test_context_overflow_ends_the_episode_truncated(serve, small_suite, tmp_path, style):
    s = serve(overflow_after=1, overflow_style=style)
    out = tmp_path / "t.jsonl"

    def rollout():
        policy = make_policy("openai:tiny", api_base=s.base, retries=3)
        return asyncio.run(run_rollout({"suite": str(small_suite)}, policy, out, n=1, limit=2))

    summary = rollout()
    assert summary.failed == 0 and summary.episodes == 2
    assert summary.truncations == {CONTEXT_OVERFLOW: 2}
    assert len(s.requests) == 4  # one turn each, then one refused request each: never retried
    for t in read_trajectories(out):
        assert t.info["status"] == "unanswered" and t.info["truncated_reason"] == CONTEXT_OVERFLOW
        assert "HTTP" in t.info["truncated_detail"] and t.reward is not None and t.reward.total == 0.0
    again = rollout()  # resuming sends nothing: the truncated episodes are done
    assert again.skipped == 2 and again.episodes == 0 and len(s.requests) == 4


def test_litellm_context_overflow_ends_the_episode(serve, small_suite, tmp_path):
    s = serve(overflow_after=1, overflow_style="vllm")
    policy = make_policy("litellm:openai/tiny", api_base=s.base, retries=2)
    out = tmp_path / "t.jsonl"
    summary = asyncio.run(run_rollout({"suite": str(small_suite)}, policy, out, n=1, limit=1))
    assert summary.failed == 0 and summary.truncations == {CONTEXT_OVERFLOW: 1}
    assert len(s.requests) == 2
    (t,) = read_trajectories(out)
    assert "maximum context length" in t.info["truncated_detail"]


def test_overflow_words_of_each_server_and_not_other_errors():
    for _status, body in OVERFLOW.values():
        assert is_context_overflow(json.dumps(body)), body
    assert is_context_overflow("Requested tokens (2285) exceed context window of 2048")  # llama-cpp-python
    assert is_context_overflow(  # LM Studio, two wordings
        "Trying to keep the first 6547 tokens when context overflows. However, the model is loaded "
        "with a context length of only 4096 tokens, which is not enough."
    )
    assert is_context_overflow(
        "The number of tokens to keep from the initial prompt is greater than the context length "
        "(n_keep: 13055>= n_ctx: 4096). Try to load the model with a larger context length"
    )
    for other in (
        "Unrecognized request argument: return_token_ids",
        "Incorrect API key provided",
        "response_format json_schema is not supported",
        "max_tokens must be at least 1, got 0",
        "The model `tiny` does not exist.",
    ):
        assert not is_context_overflow(other), other


@pytest.mark.parametrize(
    ("tool_format", "flag", "sent"),
    [
        ("openai", None, True),
        ("hermes", None, False),
        ("auto", None, False),
        ("search_r1", None, False),
        ("hermes", "--send-tools", True),
        ("openai", "--no-send-tools", False),
    ],
)
def test_tools_are_sent_for_function_calling(serve, small_suite, tmp_path, tool_format, flag, sent):
    s = serve()
    cfg = tmp_path / "env.yaml"
    cfg.write_text(f"tool_format: {tool_format}\n")
    out = tmp_path / "t.jsonl"
    argv = ["rollout", "--suite", str(small_suite), "--config", str(cfg), "--policy", "openai:tiny"]
    argv += ["--api-base", s.base, "--limit", "1", "--no-progress", "--out", str(out)]
    assert main(argv + ([flag] if flag else [])) == 0
    names = [[t["function"]["name"] for t in r.get("tools", [])] for r in s.requests]
    assert names == [["search", "open_url", "answer"] if sent else []] * len(s.requests)
    (t,) = read_trajectories(out)
    if sent:  # the calls came back structured, and the episode ran on them
        assert t.info["status"] == "answered" and t.final_report().startswith("Revenue was")
        second = s.requests[1]["messages"]
        assert second[-2]["tool_calls"][0]["function"]["name"] == "search"
        assert second[-1]["role"] == "tool" and second[-1]["tool_call_id"] == "call_0"


def test_send_tools_in_env_yaml(serve, small_suite, tmp_path):
    s = serve()
    cfg = tmp_path / "env.yaml"
    cfg.write_text("tool_format: hermes\nsend_tools: true\n")
    argv = ["rollout", "--suite", str(small_suite), "--config", str(cfg), "--policy", "openai:tiny"]
    argv += ["--api-base", s.base, "--limit", "1", "--no-progress", "--out", str(tmp_path / "t.jsonl")]
    assert main(argv) == 0
    assert all(len(r["tools"]) == 3 for r in s.requests)


def test_vllm_token_mode_overflow_is_a_stop_not_retried():
    """The trainer's vLLM path: a prompt over the server's --max-model-len ends the episode (Stop)."""
    from agentrl.rollout.episode import EpisodeSpec, Request, Stop
    from agentrl.sampling.vllm_client import VLLMClient
    from agentrl.sampling.vllm_engine import vllm_generate
    from tests.local_http import RecordingServer

    status, body = OVERFLOW["vllm"]
    s = RecordingServer(
        lambda path: (status, {"Content-Type": "application/json"}, json.dumps(body).encode())
    )

    async def go():
        async with VLLMClient(s.url, "m", retries=3) as client:
            generate = vllm_generate(client, stop_ids=[0])
            spec = EpisodeSpec("t#0", "t", 1)
            return await generate(Request(None, spec, 0, 0, 1, [], prompt_ids=[1, 2], max_tokens=4))

    try:
        out = asyncio.run(go())
    finally:
        s.close()
    assert isinstance(out, Stop) and out.reason == CONTEXT_OVERFLOW
    assert "maximum context length" in (out.detail or "") and len(s.requests) == 1


def test_litellm_policy_sends_tools_without_the_optional_mcp_package(serve, small_suite, tmp_path):
    """litellm routes every call with ``tools`` through its MCP bridge, which imports the optional
    ``mcp`` package; the policy's plain function tools must work without it."""
    s = serve()
    cfg = tmp_path / "env.yaml"
    cfg.write_text("tool_format: openai\n")
    out = tmp_path / "t.jsonl"
    argv = ["rollout", "--suite", str(small_suite), "--config", str(cfg), "--policy", "litellm:openai/tiny"]
    argv += ["--api-base", s.base, "--limit", "1", "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    assert s.requests and all(len(r["tools"]) == 3 for r in s.requests)
    (t,) = read_trajectories(out)
    assert t.info["status"] == "answered"
