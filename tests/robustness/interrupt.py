"""Helpers to run ``agentrl rollout`` as a real subprocess, SIGKILL it mid-run, tear its output
as a kill mid-write would, and compare outputs with the wall-clock timings left out."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from agentrl.trajectory import read_trajectories

ROOT = Path(__file__).resolve().parents[2]


def rollout_cmd(suite: Path, out: Path, n: int, *, noise: float = 0.4, seed: int = 11) -> list[str]:
    """The ``agentrl rollout`` command line (oracle policy) for ``n`` samples of every task of ``suite``."""
    return [
        sys.executable, "-m", "agentrl", "rollout", "--suite", str(suite), "--policy", "oracle",
        "--noise", str(noise), "-n", str(n), "--concurrency", "8", "--seed", str(seed),
        "--out", str(out), "--no-progress",
    ]  # fmt: skip


def run_to_end(cmd: list[str], env: dict[str, str]) -> dict:
    """Run the command to completion; returns its JSON summary (the last line of stdout)."""
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def kill_after(cmd: list[str], out: Path, env: dict[str, str], lines: int) -> None:
    """Start the command and SIGKILL it once ``out`` holds ``lines`` more complete lines than before."""
    rc, _, _ = signal_after(cmd, out, env, lines, signal.SIGKILL)
    assert rc == -signal.SIGKILL


def signal_after(
    cmd: list[str], out: Path, env: dict[str, str], lines: int, sig: int
) -> tuple[int, float, str]:
    """Start the command and send it ``sig`` once ``out`` holds ``lines`` more complete lines than
    before; (exit status, seconds from the signal to the exit, stderr)."""
    start = out.read_bytes().count(b"\n") if out.exists() else 0
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if out.exists() and out.read_bytes().count(b"\n") >= start + lines:
                break
            time.sleep(0.005)
        assert proc.poll() is None, "the rollout finished before it could be stopped"
        os.kill(proc.pid, sig)
        sent = time.monotonic()
        _, err = proc.communicate(timeout=60)
        return proc.returncode, time.monotonic() - sent, err
    finally:
        proc.kill()
        proc.wait(30)


def tear(out: Path, cut: int) -> int:
    """Cut ``out`` at byte ``cut`` (a record torn mid-write); returns the complete records lost."""
    data = out.read_bytes()
    with open(out, "r+b") as f:
        f.truncate(cut)
    return data.count(b"\n") - data[:cut].count(b"\n")


def canonical(out: Path) -> dict[str, str]:
    """id -> trajectory JSON without wall-clock timings; asserts no torn, bad or duplicate line."""
    raw = out.read_bytes()
    assert raw.endswith(b"\n"), "the file ends in a torn line"
    lines = raw.split(b"\n")[:-1]
    trajs = list(read_trajectories(out))  # raises on any bad line
    assert len(trajs) == len(lines), "blank or skipped lines"
    by_id: dict[str, str] = {}
    for t in trajs:
        assert t.id not in by_id, f"duplicate {t.id}"
        t.info.pop("elapsed_s", None)
        for entry in t.info.get("tool_log", []):
            entry.pop("seconds", None)
        by_id[t.id] = t.to_json()
    return by_id
