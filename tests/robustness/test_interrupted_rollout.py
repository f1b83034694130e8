"""An interrupted ``agentrl rollout`` resumes: a real subprocess is SIGKILLed mid-run (and the
file is cut at a random byte, as a kill mid-write leaves it); re-running the same command gives
every episode exactly once, no torn or duplicate record, and the same trajectories as a run that
was never interrupted (timings aside)."""

from __future__ import annotations

import json
import os
import random
import signal
from pathlib import Path

import pytest

from agentrl.trajectory import read_trajectories
from tests.robustness.interrupt import (
    ROOT,
    canonical,
    kill_after,
    rollout_cmd,
    run_to_end,
    signal_after,
    tear,
)

N_SAMPLES = 6  # 33 tasks x 6 samples = 198 episodes


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> Path:
    from agentrl.env.sandbox import build

    out = tmp_path_factory.mktemp("suite")
    build(out, seed=5, companies=3)
    return out


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    cache = tmp_path_factory.mktemp("cache")
    return {**os.environ, "AGENTRL_CACHE": str(cache), "PYTHONPATH": str(ROOT)}


@pytest.fixture(scope="module")
def reference(suite, env, tmp_path_factory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("ref") / "trajectories.jsonl"
    summary = run_to_end(rollout_cmd(suite, out, N_SAMPLES), env)
    assert summary["episodes"] == 33 * N_SAMPLES and summary["failed"] == 0
    ref = canonical(out)
    assert len(ref) == 33 * N_SAMPLES
    assert len({json.loads(v)["reward"]["total"] for v in ref.values()}) > 1  # noise: rewards differ
    return ref


def test_sigkill_mid_run_then_resume(suite, env, reference, tmp_path):
    out = tmp_path / "trajectories.jsonl"
    cmd = rollout_cmd(suite, out, N_SAMPLES)
    kill_after(cmd, out, env, lines=20)
    done = len(list(read_trajectories(out)))
    assert 0 < done < len(reference)
    summary = run_to_end(cmd, env)
    assert summary["skipped"] == done and summary["episodes"] == len(reference) - done
    assert canonical(out) == reference


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_or_ctrl_c_stops_within_its_episodes_then_resume(suite, env, reference, tmp_path, sig):
    """The command stops at its episodes' next turn (agentrl.stopping), says so, exits 143 or 130, and
    the episodes it had not finished are not in the file: re-running completes it exactly."""
    out = tmp_path / "trajectories.jsonl"
    cmd = rollout_cmd(suite, out, N_SAMPLES)
    rc, seconds, err = signal_after(cmd, out, env, 20, sig)
    assert rc == (143 if sig == signal.SIGTERM else 130), err[-2000:]
    assert err.strip().splitlines()[-1] == "interrupted" and "Traceback" not in err
    assert seconds < 10  # within a second of work; the rest is the interpreter's exit on a busy machine
    done = len(list(read_trajectories(out)))
    assert 0 < done < len(reference)
    summary = run_to_end(cmd, env)
    assert summary["skipped"] == done and canonical(out) == reference


def test_kill_torn_write_and_kill_again_then_resume(suite, env, reference, tmp_path):
    """Two kills; after each the file is cut at a random byte (a record torn mid-write)."""
    out = tmp_path / "trajectories.jsonl"
    cmd = rollout_cmd(suite, out, N_SAMPLES)
    rng = random.Random(0)
    for _ in range(2):
        kill_after(cmd, out, env, lines=15)
        size = out.stat().st_size
        tear(out, rng.randrange(size // 2, size))
    summary = run_to_end(cmd, env)
    assert summary["failed"] == 0 and summary["skipped"] + summary["episodes"] == len(reference)
    assert canonical(out) == reference
