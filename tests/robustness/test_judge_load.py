"""The judge under load against a flaky loopback server: every trajectory comes back exactly once,
either ``ok`` with exactly its correct score or ``judge_error`` with a null total; none is lost.

The default run judges 200 trajectories in-process (``score_trajectories``, the function
``agentrl judge`` calls, with short backoffs); the 1,000-episode run through the real CLI is
``python -m tests.bench.reliability`` or ``AGENTRL_RELIABILITY=1 pytest -m slow tests/robustness``.
``agentrl rollout --judge-model`` (the oracle on a sandbox with an LLM criterion) meets the same
server in the last test.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.robustness.flaky_judge import FAULTS, FlakyJudgeServer, LoadResult, make_report, run_load


def _check(r: LoadResult, n: int) -> None:
    assert not r.problems, r.problems[:10]
    assert r.ok + r.judge_error == n
    # the injected mix: every kind of fault, about 30% of all requests
    assert set(FAULTS) <= set(r.injected), r.injected
    failed = sum(v for k, v in r.injected.items() if k != "none")
    assert 0.2 <= failed / r.requests <= 0.4, r.injected
    # the judge recovered most of them (a judge that gave up at once would pass the rest of the checks)
    assert r.ok >= 0.8 * n, (r.ok, r.judge_error, r.errors)
    assert r.retries > 0 and r.requests <= r.client_calls  # every request the server saw was counted


def test_judge_under_30_percent_faults_loses_nothing_and_scores_correctly(tmp_path):
    r = run_load(tmp_path, 200, via="api", timeout_s=0.5, backoff_base_s=0.02)
    _check(r, 200)


def test_fault_schedule_is_a_function_of_the_report_and_attempt():
    a, b = FlakyJudgeServer(seed=3), FlakyJudgeServer(seed=3)
    reports = [make_report(i)[0] for i in range(200)]
    schedule = [a.fault(rep, k) for rep in reports for k in (1, 2, 3)]
    assert schedule == [b.fault(rep, k) for rep in reports for k in (1, 2, 3)]
    assert 0.2 <= sum(f is not None for f in schedule) / len(schedule) <= 0.4


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("AGENTRL_RELIABILITY"),
    reason="1,000 episodes through the CLI: set AGENTRL_RELIABILITY=1",
)
def test_cli_1000_episodes(tmp_path):
    r = run_load(tmp_path, 1000, via="cli")
    _check(r, 1000)


@pytest.mark.parametrize("garbage", [b"", b"not a database\n" * 200, b"SQLite format 3\x00" + b"\xff" * 5000])
def test_a_corrupt_verdict_cache_is_one_line_error_not_a_traceback(tmp_path, garbage):
    """Regression: sqlite3.DatabaseError ("file is not a database") escaped as a traceback."""
    import subprocess
    import sys

    from tests.robustness.flaky_judge import ROOT, write_inputs

    traj, rubric, _ = write_inputs(tmp_path, 3)
    cache = tmp_path / "judge.sqlite"
    cache.write_bytes(garbage)
    proc = subprocess.run(
        [sys.executable, "-m", "agentrl", "judge", str(traj), "--rubric", str(rubric), "--cache", str(cache)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    if not garbage:  # an empty file is a fine new database; this rubric then needs a --model
        assert proc.returncode != 0 and "--model" in proc.stderr and "Traceback" not in proc.stderr
        return
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert (
        proc.stderr.strip().count("\n") == 0 and f"{cache}: cannot use it as the verdict cache" in proc.stderr
    )


def test_rollout_with_a_flaky_judge_writes_every_episode_once_scored_or_judge_error(tmp_path):
    """``agentrl rollout --judge-model`` (oracle on a sandbox whose rubrics have an LLM criterion)
    against the flaky judge. Its judge keeps the default 120 s timeout, so no hang faults here."""
    import subprocess
    import sys
    from collections import Counter

    from agentrl.env.sandbox import build
    from agentrl.judge import breakdown, evidence_of, parse_rubric
    from agentrl.judge.graders import grade_criterion
    from agentrl.trajectory import read_trajectories
    from tests.robustness.flaky_judge import ROOT

    suite, out = tmp_path / "suite", tmp_path / "trajectories.jsonl"
    build(suite, seed=5, companies=3, llm_criteria=True)
    env = {**os.environ, "AGENTRL_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    with FlakyJudgeServer(failure_rate=0.3, faults=[f for f in FAULTS if f != "timeout"], seed=1) as server:
        cmd = [
            sys.executable, "-m", "agentrl", "rollout", "--suite", str(suite), "--policy", "oracle",
            "--noise", "0.4", "--judge-model", "flaky", "--judge-api-base", server.url, "--out", str(out),
            "--no-progress",
        ]  # fmt: skip
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        faults = Counter(r["fault"] for r in server.requests)
    trajs = list(read_trajectories(out))
    assert len(trajs) == 33 and len({t.id for t in trajs}) == 33
    assert sum(v for k, v in faults.items() if k) > 0
    status = Counter()
    for t in trajs:
        r = t.reward
        status[r.status] += 1
        if r.status == "judge_error":
            assert r.total is None and r.error
            continue
        # The fake judge finds no backticked phrase in the LLM criterion: Not Satisfied, score 0.
        rubric = parse_rubric(t.info["rubric"])
        assert rubric.aggregation == "weighted_sum"
        report, seen = t.final_report(), evidence_of(t)  # evidence graders read what the agent did
        graded = [
            grade_criterion(c, report, rubric.mapping, evidence=seen) for c in rubric.criteria if not c.is_llm
        ]
        expected = breakdown(rubric, graded + [c for c in r.criteria if c.grader == "llm"]).total
        assert [c.verdict for c in r.criteria if c.grader == "llm"] == ["Not Satisfied"]
        assert abs(r.total - expected) < 1e-9, (t.id, r.total, expected)
    assert status["ok"] >= 25, status
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["judge_errors"] == status["judge_error"] and summary["scored"] == status["ok"]
