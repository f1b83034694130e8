"""Rollouts: bounded concurrency, resumability, summary, and the CLI commands."""

from __future__ import annotations

import argparse
import asyncio
import json

from agentrl.policy import OraclePolicy
from agentrl.rollout import run_rollout
from agentrl.trajectory import read_trajectories


def test_rollout_writes_and_resumes(small_suite, tmp_path):
    out = tmp_path / "run" / "trajectories.jsonl"
    cfg = {"suite": str(small_suite)}
    s1 = asyncio.run(run_rollout(cfg, OraclePolicy(noise=0.3), out, n=2, concurrency=4, limit=5))
    assert s1.episodes == 10 and s1.failed == 0 and s1.mean_reward is not None
    trajs = list(read_trajectories(out))
    assert len({t.id for t in trajs}) == 10 and all(t.reward is not None for t in trajs)
    s2 = asyncio.run(run_rollout(cfg, OraclePolicy(noise=0.3), out, n=3, concurrency=4, limit=5))
    assert s2.skipped == 10 and s2.episodes == 5
    assert len(list(read_trajectories(out))) == 15


def test_rollout_is_order_independent(small_suite, tmp_path):
    cfg = {"suite": str(small_suite)}
    a = asyncio.run(run_rollout(cfg, OraclePolicy(noise=0.5), tmp_path / "a.jsonl", concurrency=1, limit=8))
    b = asyncio.run(run_rollout(cfg, OraclePolicy(noise=0.5), tmp_path / "b.jsonl", concurrency=8, limit=8))
    assert a.mean_reward == b.mean_reward
    ra = {t.id: t.reward.total for t in read_trajectories(tmp_path / "a.jsonl")}
    rb = {t.id: t.reward.total for t in read_trajectories(tmp_path / "b.jsonl")}
    assert ra == rb


def _parser():
    from agentrl.cli import rollout, sandbox

    p = argparse.ArgumentParser()
    p.add_argument("--debug", action="store_true")
    sub = p.add_subparsers(dest="command")
    rollout.register(sub)
    sandbox.register(sub)
    return p


def test_cli_sandbox_build_and_rollout(tmp_path, capsys):
    p = _parser()
    args = p.parse_args(
        ["sandbox", "build", "--seed", "1", "--companies", "2", "--out", str(tmp_path / "sb")]
    )
    assert args.handler(args) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["pages"] == 230 and stats["tasks"] == 22
    out = tmp_path / "r" / "t.jsonl"
    argv = ["rollout", "--suite", str(tmp_path / "sb"), "--out", str(out), "-n", "2", "--no-progress"]
    args = p.parse_args(argv)
    assert args.handler(args) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["episodes"] == 44 and summary["mean_reward"] == 2.5
    args = p.parse_args(argv)
    assert args.handler(args) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["skipped"] == 44


def _judge_server():
    from .openai_server import FakeChatServer

    class JudgeServer(FakeChatServer):
        def reply(self, body):
            verdicts = {
                "criteria": [
                    {
                        "id": "accuracy",
                        "reasoning": "gives $12.3 billion for Q1",
                        "verdict": "Fully Satisfied",
                    },
                    {"id": "temporal", "reasoning": "says not yet published", "verdict": "Fully Satisfied"},
                ]
            }
            msg = {"role": "assistant", "content": json.dumps(verdicts)}
            return {
                "id": "j",
                "object": "chat.completion",
                "model": body["model"],
                "choices": [{"index": 0, "message": msg, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
            }

    return JudgeServer()


def test_llm_rubric_is_judged_in_a_batch_at_the_end(tmp_path):
    """A rubric with LLM criteria: reward deferred in the env, then scored by the judge (local server)."""
    from agentrl.policy import OraclePolicy

    from .conftest import ALPHABET

    server = _judge_server()
    try:
        out = tmp_path / "t.jsonl"
        cfg = {"suite": str(ALPHABET), "judge": "deferred"}
        s = asyncio.run(
            run_rollout(
                cfg,
                OraclePolicy(),
                out,
                tasks=["alphabet-2025-cloud-llm"],
                judge_model="judge-model",
                judge_api_base=server.base,
            )
        )
        assert s.judged == 1 and s.episodes == 1
        (traj,) = list(read_trajectories(out))
        assert traj.reward.status == "ok" and traj.reward.total == 2.5
        assert {c.id: c.grader for c in traj.reward.criteria}["citation"] == "cited_source"
        assert server.requests and server.requests[0]["model"] == "judge-model"
    finally:
        server.close()


def test_the_end_judge_keeps_its_verdicts_in_the_cache(tmp_path):
    """With a verdict cache, a re-run (say after a kill while judging) asks the judge nothing again."""
    from agentrl.policy import OraclePolicy

    from .conftest import ALPHABET

    server = _judge_server()
    try:
        cfg = {"suite": str(ALPHABET), "judge": "deferred"}
        cache = str(tmp_path / "verdicts.sqlite")
        rewards = []
        for name in ("a.jsonl", "b.jsonl"):
            asyncio.run(
                run_rollout(
                    cfg, OraclePolicy(), tmp_path / name, tasks=["alphabet-2025-cloud-llm"],
                    judge_model="judge-model", judge_api_base=server.base, judge_cache=cache,
                )
            )  # fmt: skip
            rewards.append([t.reward.total for t in read_trajectories(tmp_path / name)])
            if name == "a.jsonl":
                calls = len(server.requests)
        assert calls > 0 and len(server.requests) == calls  # the second run was answered from the cache
        assert rewards[0] == rewards[1] == [2.5]
    finally:
        server.close()


def test_inline_llm_judge_scores_in_step():
    from agentrl.env import ResearchEnv

    from .conftest import ALPHABET, call

    server = _judge_server()
    try:
        cfg = {
            "suite": str(ALPHABET),
            "judge": "inline",
            "judge_model": "judge-model",
            "judge_api_base": server.base,
        }
        env = ResearchEnv(cfg)
        env.reset(options={"task": "alphabet-2025-cloud-llm"})
        env.step(call("open_url", url="https://abc.xyz/investor/news/2025-04-24-q1-2025-results"))
        report = "Q1 2025 only; the full year is not out yet. Cloud revenue $12.3 billion \\cite{alphabet-q1-2025}."
        _, reward, term, _, info = env.step(call("answer", report=report))
        assert term and reward == 2.5 and not info["needs_judge"]
    finally:
        server.close()


def test_cli_rollout_reports_the_training_measures(tmp_path, capsys):
    """``--policy oracle`` on the quickstart suite: the normalised reward, the share of episodes
    with a tool call and the official share of the pages opened, in the JSON and the human line."""
    from pathlib import Path

    suite = str(Path(__file__).resolve().parents[2] / "examples" / "quickstart-env")
    p = _parser()
    out = {}
    for noise in ("0", "0.5"):
        argv = ["rollout", "--suite", suite, "--noise", noise, "-n", "2", "--no-progress"]
        args = p.parse_args([*argv, "--out", str(tmp_path / f"{noise}.jsonl")])
        assert args.handler(args) == 0
        captured = capsys.readouterr()
        out[noise] = json.loads(captured.out.strip().splitlines()[-1])
        share = out[noise]["official_share"]
        assert f"official {share:.0%} of {out[noise]['opened_pages']} pages opened" in " ".join(
            captured.err.split()
        )
    clean, noisy = out["0"], out["0.5"]
    assert clean["official_share"] == 1.0 and clean["opened_pages"] == clean["opened_official"] == 66
    assert 0 < noisy["official_share"] < 1.0
    assert noisy["opened_official"] / noisy["opened_pages"] == noisy["official_share"]
    assert clean["tool_call_episodes"] == noisy["tool_call_episodes"] == 1.0
    assert 0 < noisy["mean_normalized_reward"] < clean["mean_normalized_reward"] <= 1.0
