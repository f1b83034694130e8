"""``agentrl rollout --ray``: the asyncio path's trajectories, streamed in completion order, resumable."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
from functools import partial

import pytest

pytest.importorskip("ray", reason="Ray is not installed (pip install 'agentrl[ray]')")

from agentrl.env.suite import load_suite
from agentrl.policy import OraclePolicy
from agentrl.rollout import run_rollout
from agentrl.rollout.ray_backend import run_rollout_ray
from agentrl.trajectory import read_trajectories

from .conftest import by_id
from .policies import TroubleOracle

pytestmark = pytest.mark.ray


def _cli(argv: list[str], capsys) -> dict:
    from agentrl.cli import rollout

    p = argparse.ArgumentParser()
    rollout.register(p.add_subparsers(dest="command"))
    args = p.parse_args(argv)
    assert args.handler(args) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_cli_ray_replaying_a_recorded_cache_gives_the_asyncio_trajectories(
    ray_cluster, small_suite, tmp_path, capsys
):
    common = ["rollout", "--suite", str(small_suite), "--noise", "0.5", "-n", "2", "--limit", "4"]
    common += [
        "--seed",
        "3",
        "--concurrency",
        "4",
        "--no-progress",
        "--cache-path",
        str(tmp_path / "tools.sqlite"),
    ]
    a = _cli([*common, "--out", str(tmp_path / "a.jsonl"), "--cache", "record"], capsys)
    with sqlite3.connect(tmp_path / "tools.sqlite") as db:
        recorded = db.execute("SELECT COUNT(*) FROM tool_calls").fetchone()[0]
    # Two worker processes replaying from the file: any call not recorded would be a tool error.
    b = _cli(
        [*common, "--out", str(tmp_path / "b.jsonl"), "--cache", "replay", "--ray", "--ray-workers", "2"],
        capsys,
    )
    assert a["episodes"] == b["episodes"] == 8 and b["failed"] == 0 and b["errors"] == 0
    assert a["mean_reward"] == b["mean_reward"]
    for key in ("mean_normalized_reward", "tool_call_episodes", "opened_pages", "official_share"):
        assert a[key] == b[key] and b[key] is not None, key
    ta = by_id(tmp_path / "a.jsonl")
    assert ta == by_id(tmp_path / "b.jsonl")
    assert len({t["reward"]["total"] for t in ta.values()}) > 1  # noise 0.5: not all the same episode
    assert 0 < recorded <= sum(t["info"]["tool_calls"] for t in ta.values())
    assert ray_cluster.is_initialized()  # a running Ray is reused and left running


def test_results_stream_in_completion_order_failures_are_retried_on_resume(
    ray_cluster, small_suite, tmp_path
):
    out = tmp_path / "t.jsonl"
    cfg = {"suite": str(small_suite)}
    ids = [t.id for t in load_suite(small_suite).tasks[:5]]
    slow, broken = ids[0], ids[4]  # the slow one is submitted first
    seen: list[tuple[str, int]] = []

    def on_done(traj):
        seen.append((traj.id if traj else "failed", len(out.read_text().splitlines())))

    policy = partial(TroubleOracle, slow, 0.4, broken)
    s = asyncio.run(run_rollout_ray(cfg, policy, out, limit=5, concurrency=4, on_done=on_done))
    assert s.episodes == 4 and s.failed == 1
    assert s.failures == [f"{broken}#0: RuntimeError: {broken} fails"]
    done = [(i, n) for i, n in seen if i != "failed"]
    assert done[-1][0] == f"{slow}#0"  # the slow episode finished last ...
    assert [n for _, n in done] == [1, 2, 3, 4]  # ... and each one was on disk when reported
    written = list(read_trajectories(out))
    assert [t.id for t in written] == [i for i, _ in done]
    pids = {t.info["policy"] for t in written}
    assert len(pids) == 2 and f"oracle@{os.getpid()}" not in pids  # both workers, not the driver

    # Resume with a second sample each: the 4 done episodes are skipped, the failed one runs again.
    policy = partial(TroubleOracle, slow, 0.0)
    s2 = asyncio.run(run_rollout_ray(cfg, policy, out, n=2, limit=5, workers=1))
    assert s2.skipped == 4 and s2.episodes == 6 and s2.failed == 0
    asyncio.run(run_rollout(cfg, OraclePolicy(), tmp_path / "ref.jsonl", n=2, limit=5))
    no_policy = frozenset({"policy"})
    assert by_id(out, no_policy) == by_id(tmp_path / "ref.jsonl", no_policy)
