"""The judge under load against a flaky loopback server: every trajectory comes back exactly once,
either ``ok`` with exactly its correct score or ``judge_error`` with a null total; none is lost.

The default run judges 200 trajectories in-process (``score_trajectories``, the function
``agentrl judge`` calls, with short backoffs); the 1,000-episode run through the real CLI is
``python -m tests.bench.reliability`` or ``AGENTRL_RELIABILITY=1 pytest -m slow tests/robustness``.
"""

from __future__ import annotations

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
