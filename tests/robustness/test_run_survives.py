"""A run survives being killed at any point, and ``--resume`` finishes it as if nothing happened.

``agentrl train`` (a subprocess, the tiny trainer config with a warm start) is killed at chosen
points, then resumed with ``--resume``; the finished run's ``metrics.jsonl`` (wall-clock timings
left out), ``sft.jsonl`` and summary equal those of an uninterrupted run:

- SIGKILL during the warm start, after a warm-start checkpoint (``sft_checkpoint_every``): the
  resume goes on from that warm-start step with its optimiser and batch sampler; the resumed run is
  then stopped by SIGTERM during RL, after an RL checkpoint: exit 143, one line saying where
  ``--resume`` goes on from, and a ``summary.json`` and curve marked interrupted; resumed again.
- SIGKILL before the first checkpoint (during the setup): ``--resume`` starts the run over.

Before: ``checkpoint_every: 0`` meant a checkpoint only at the end, a kill lost everything and left
no summary, a plain re-run said the directory "already holds a run ... --resume continues it", and
``--resume`` said it "has no complete checkpoint". Old checkpoints are pruned (``checkpoint_keep``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from agentrl.errors import ConfigError
from agentrl.train.preflight import check_output_dir
from tests.train.learning_signal import config_dict

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
VOLATILE = ("timing_s/", "perf/")


def _config(base: Path) -> Path:
    data = config_dict(
        steps=4, sft_steps=4, sft_episodes=8, checkpoint_every=2, sft_checkpoint_every=2, checkpoint_keep=2
    )
    data["rollout"]["torch_threads"] = 1
    cfg = base / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(data))
    return cfg


def _cmd(cfg: Path, run: Path, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "agentrl",
        "train",
        str(cfg),
        "--no-progress",
        "--set",
        f"output_dir={run}",
        *args,
    ]


def _finish(cfg: Path, run: Path, *args: str) -> subprocess.CompletedProcess:
    p = subprocess.run(_cmd(cfg, run, *args), env=ENV, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


def _kill_when(cfg: Path, run: Path, ready, sig: int, *args: str) -> tuple[int, str]:
    """Start the run, send ``sig`` once ``ready(run)`` holds; (exit status, stderr)."""
    p = subprocess.Popen(
        _cmd(cfg, run, *args), env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 300
        while not ready(run):
            assert p.poll() is None, "the run ended before it could be stopped"
            assert time.monotonic() < deadline, "the kill point never came"
            time.sleep(0.01)
        os.kill(p.pid, sig)
        _, err = p.communicate(timeout=120)
    finally:
        p.kill()
    return p.returncode, err


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def _outcome(run: Path) -> dict:
    """What must not depend on interruptions: metrics without timings, warm-start losses, summary."""
    metrics = [
        {k: v for k, v in json.loads(line).items() if not k.startswith(VOLATILE)}
        for line in (run / "metrics.jsonl").read_text().splitlines()
    ]
    summary = json.loads((run / "summary.json").read_text())
    for key in ("time_s", "reward_curve"):
        summary.pop(key)
    summary["final"] = {k: v for k, v in summary["final"].items() if not k.startswith(VOLATILE)}
    return {"metrics": metrics, "sft": (run / "sft.jsonl").read_text(), "summary": summary}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    base = tmp_path_factory.mktemp("survive")
    cfg = _config(base)
    _finish(cfg, base / "straight")
    out = _outcome(base / "straight")
    assert [m["step"] for m in out["metrics"]] == [1, 2, 3, 4] and out["sft"].count("\n") == 4
    assert len({m["critic/score/mean"] for m in out["metrics"]}) > 1  # the steps differ: a real run
    return cfg, out, base / "straight"


def test_the_uninterrupted_run_checkpoints_often_and_keeps_the_last_few(reference):
    _, _, run = reference
    # step 0 (the warm start's end), 2 and 4 were written; two are kept; the warm-start one is gone
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_00002", "step_00004"]
    assert not (run / ".agentrl.lock").exists()


@pytest.mark.long
def test_killed_in_the_warm_start_then_stopped_in_rl_resumes_exactly(reference, tmp_path):
    cfg, want, _ = reference
    run = tmp_path / "run"
    # 1. SIGKILL after warm-start step 3 (its checkpoint sft_00002 is complete)
    rc, _ = _kill_when(cfg, run, lambda r: _lines(r / "sft.jsonl") >= 3, signal.SIGKILL)
    assert rc == -signal.SIGKILL
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["sft_00002"]
    assert not (run / "summary.json").exists()
    # 2. a plain re-run says what to do; --resume goes on, and a SIGTERM during RL step 3 stops it
    # once that step is done (a SIGTERM stops a run between steps)
    with pytest.raises(ConfigError, match=r"already holds a run .*--resume continues it"):
        check_output_dir(run)
    rc, err = _kill_when(cfg, run, lambda r: _lines(r / "metrics.jsonl") >= 2, signal.SIGTERM, "--resume")
    assert rc == 143, err[-3000:]
    assert "restoring the latest checkpoint (sft_00002)" in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("agentrl train: error: ") is False and last.startswith(
        "interrupted: SIGTERM after step "
    )
    assert last.endswith("--resume goes on from checkpoints/step_00002"), last
    summary = json.loads((run / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["last_checkpoint"] == "step_00002"
    assert summary["steps"] in (2, 3) and (run / "reward_curve.png").stat().st_size > 0
    # 3. resumed from RL step 2: the finished run is the uninterrupted one
    p = _finish(cfg, run, "--resume")
    assert "restoring the latest checkpoint (step_00002)" in p.stderr
    assert _outcome(run) == want


def test_killed_before_the_first_checkpoint_resume_starts_over(reference, tmp_path):
    cfg, want, _ = reference
    run = tmp_path / "run"
    rc, _ = _kill_when(cfg, run, lambda r: (r / "tokenizer").exists(), signal.SIGKILL)
    assert rc == -signal.SIGKILL and not (run / "checkpoints").exists()
    p = _finish(cfg, run, "--resume")
    assert "the run stopped before its first checkpoint; starting it over" in p.stderr
    assert _outcome(run) == want


@pytest.mark.parametrize("state", ["missing", "empty"])
def test_resume_with_no_run_says_to_start_one(tmp_path, state):
    out = tmp_path / "out"
    if state == "empty":
        out.mkdir()
    with pytest.raises(
        ConfigError, match=rf"^--resume: output_dir {out} .*; run without --resume to start one$"
    ):
        check_output_dir(out, resume=True)
