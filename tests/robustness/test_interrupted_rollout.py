"""An interrupted ``agentrl rollout`` resumes: a real subprocess is SIGKILLed mid-run (and the
file is cut at a random byte, as a kill mid-write leaves it); re-running the same command gives
every episode exactly once, no torn or duplicate record, and the same trajectories as a run that
was never interrupted (timings aside)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentrl.trajectory import read_trajectories

ROOT = Path(__file__).resolve().parents[2]
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


def _cmd(suite: Path, out: Path) -> list[str]:
    return [
        sys.executable, "-m", "agentrl", "rollout", "--suite", str(suite), "--policy", "oracle",
        "--noise", "0.4", "-n", str(N_SAMPLES), "--concurrency", "8", "--seed", "11",
        "--out", str(out), "--no-progress",
    ]  # fmt: skip


def _run(suite: Path, out: Path, env: dict[str, str]) -> dict:
    proc = subprocess.run(_cmd(suite, out), env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _kill_after(suite: Path, out: Path, env: dict[str, str], lines: int) -> None:
    """Start the rollout and SIGKILL it once ``out`` holds at least ``lines`` more complete lines."""
    start = out.read_bytes().count(b"\n") if out.exists() else 0
    proc = subprocess.Popen(_cmd(suite, out), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if out.exists() and out.read_bytes().count(b"\n") >= start + lines:
                break
            time.sleep(0.005)
        assert proc.poll() is None, "the rollout finished before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL


def _canonical(out: Path) -> dict[str, str]:
    """id -> trajectory JSON without the wall-clock timings; asserts the file is clean."""
    raw = out.read_bytes()
    assert raw.endswith(b"\n")
    lines = raw.split(b"\n")[:-1]
    trajs = list(read_trajectories(out))  # raises on any bad line, warns on a torn one
    assert len(trajs) == len(lines)
    by_id: dict[str, str] = {}
    for t in trajs:
        assert t.id not in by_id, f"duplicate {t.id}"
        t.info.pop("elapsed_s", None)
        for entry in t.info.get("tool_log", []):
            entry.pop("seconds", None)
        by_id[t.id] = t.to_json()
    return by_id


@pytest.fixture(scope="module")
def reference(suite, env, tmp_path_factory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("ref") / "trajectories.jsonl"
    summary = _run(suite, out, env)
    assert summary["episodes"] == 33 * N_SAMPLES and summary["failed"] == 0
    ref = _canonical(out)
    assert len(ref) == 33 * N_SAMPLES
    assert len({json.loads(v)["reward"]["total"] for v in ref.values()}) > 1  # noise: rewards differ
    return ref


def test_sigkill_mid_run_then_resume(suite, env, reference, tmp_path):
    out = tmp_path / "trajectories.jsonl"
    _kill_after(suite, out, env, lines=20)
    done = len(list(read_trajectories(out)))
    assert 0 < done < len(reference)
    summary = _run(suite, out, env)
    assert summary["skipped"] == done and summary["episodes"] == len(reference) - done
    assert _canonical(out) == reference


def test_kill_torn_write_and_kill_again_then_resume(suite, env, reference, tmp_path):
    """Two kills; after each the file is cut at a random byte (a record torn mid-write)."""
    out = tmp_path / "trajectories.jsonl"
    rng = random.Random(os.environ.get("AGENTRL_TEST_SEED", "0"))
    for _ in range(2):
        _kill_after(suite, out, env, lines=15)
        size = out.stat().st_size
        cut = rng.randrange(size // 2, size)
        with open(out, "r+b") as f:
            f.truncate(cut)
    summary = _run(suite, out, env)
    assert summary["failed"] == 0 and summary["skipped"] + summary["episodes"] == len(reference)
    assert _canonical(out) == reference
