"""One writer per run directory and per rollout output.

Two ``agentrl train CONFIG --resume`` into one ``output_dir`` both exited 0, and ``metrics.jsonl``
held steps ``..., 7, 8, 8, 9, 9``; two ``agentrl rollout`` into one ``--out`` wrote the same
episodes twice. Now the writer holds a lock file for its life (``agentrl.runlock``): the second is
refused in one line naming the first (pid, host, command), and the first's files are intact. A lock
left by a dead process (SIGKILL) is no obstacle; where ``flock`` is missing, the recorded pid and
host decide.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from agentrl import runlock
from agentrl.errors import ConfigError
from agentrl.rundir import LOCK, RunDir
from agentrl.runlock import LockHeld, file_lock_path, holder_of, lock_output
from agentrl.train import Trainer, load_train_config
from tests.robustness.cli_run import agentrl, build_tiny_suite
from tests.robustness.interrupt import canonical, rollout_cmd
from tests.train.learning_signal import config_dict

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}

_HOLD = textwrap.dedent(
    """
    import sys, time
    from agentrl.runlock import lock_output
    lock = lock_output(sys.argv[1], what="test")
    print("held", flush=True)
    time.sleep(600)
    """
)


def _wait_for_holder(lock: Path, pid: int, proc: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the first writer ended before the second started"
        if (holder_of(lock) or {}).get("pid") == pid:
            return
        time.sleep(0.05)
    raise AssertionError(f"{lock} never held by {pid}")


def test_a_live_holder_refuses_and_a_killed_one_does_not(tmp_path):
    lock = tmp_path / "out" / LOCK
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(lock)], env=ENV, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(LockHeld) as e:
            lock_output(lock, what="output_dir out")
        msg = str(e.value)
        assert (
            msg.startswith("output_dir out is in use by `")
            and f"(pid {holder.pid} on {socket.gethostname()}" in msg
        )
        assert "\n" not in msg
        os.kill(holder.pid, signal.SIGKILL)  # the kernel drops its lock; the file (and record) stay
        holder.wait(30)
        assert lock.exists() and holder_of(lock) is None
        with lock_output(lock, what="output_dir out"):
            assert (holder_of(lock) or {}).get("pid") == os.getpid() == json.loads(lock.read_text())["pid"]
        assert not lock.exists()
    finally:
        holder.kill()
        holder.wait(30)


def test_without_flock_the_record_decides(tmp_path, monkeypatch):
    monkeypatch.setattr(runlock, "fcntl", None)
    lock = tmp_path / LOCK
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    me = socket.gethostname()
    lock.write_text(json.dumps({"pid": int(dead.stdout), "host": me}))
    lock_output(lock, what="x").release()  # a dead process on this host: stale, taken over
    lock.write_text(json.dumps({"pid": os.getppid(), "host": me, "command": "agentrl train c.yaml"}))
    with pytest.raises(LockHeld, match=r"^x is in use by `agentrl train c\.yaml` \(pid \d+ on "):
        lock_output(lock, what="x")
    lock.write_text(json.dumps({"pid": 1, "host": "elsewhere"}))
    with pytest.raises(
        LockHeld, match=rf"on another host of a file system without locks: if that run is gone, delete {lock}"
    ):
        lock_output(lock, what="x")


def test_the_lock_file_is_neither_the_run_nor_foreign(tmp_path):
    run = RunDir(tmp_path)
    with lock_output(run.lock_file, what="output_dir"):
        run.append_metrics({"step": 1})
        assert run.entries() == (["metrics.jsonl"], [])
        assert run.clear() == ["metrics.jsonl"] and run.lock_file.exists()


def test_a_refused_lock_creates_no_directory(tmp_path):
    out = tmp_path / "a" / "b"
    with lock_output(out / LOCK, what="x") as lock:
        assert lock.created == [out, tmp_path / "a"]
    assert not (tmp_path / "a").exists()  # released while empty: the directories it made go too


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished 2-step run with a checkpoint at step 2: (config, run directory)."""
    base = tmp_path_factory.mktemp("lock-train")
    cfg = base / "cfg.yaml"
    data = config_dict(output_dir=str(base / "run"), steps=2, sft_steps=0, checkpoint_every=1)
    data["rollout"]["torch_threads"] = 1
    cfg.write_text(yaml.safe_dump(data))
    Trainer(load_train_config(cfg), progress=False).run()
    return cfg, base / "run"


def test_two_resumes_into_one_run_the_second_is_refused(trained, capsys):
    cfg, run = trained
    cmd = [
        sys.executable,
        "-m",
        "agentrl",
        "train",
        str(cfg),
        "--resume",
        "--set",
        "steps=4",
        "--no-progress",
    ]
    first = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_holder(RunDir(run).lock_file, first.pid, first)
        rc, err = agentrl(capsys, "train", cfg, "--resume", "--set", "steps=4", "--no-progress")
        assert rc == 1 and len(err) == 1, err
        assert err[0].startswith(f"agentrl train: error: output_dir {run} is in use by `")
        assert f"(pid {first.pid} on " in err[0] and "--resume" in err[0]
        _, stderr = first.communicate(timeout=600)
        assert first.returncode == 0, stderr[-3000:]
    finally:
        first.kill()
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]
    assert sorted(RunDir(run).trajectory_files()) == [1, 2, 3, 4]
    assert not RunDir(run).lock_file.exists()
    # and the library refuses the same way, before touching anything
    with lock_output(RunDir(run).lock_file, what="someone"):
        before = (run / "metrics.jsonl").read_bytes()
        with pytest.raises(ConfigError, match=rf"^output_dir {run} is in use by "):
            Trainer(load_train_config(cfg, {"steps": 5}), progress=False).run(resume=True)
        assert (run / "metrics.jsonl").read_bytes() == before


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    return build_tiny_suite(tmp_path_factory)


def test_two_rollouts_into_one_output_the_second_is_refused(suite, tmp_path, capsys):
    out = tmp_path / "o.jsonl"
    cmd = rollout_cmd(suite, out, 30)
    first = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_holder(file_lock_path(out), first.pid, first)
        rc, err = agentrl(capsys, *cmd[3:])
        assert rc == 1 and len(err) == 1, err
        assert (
            err[0].startswith(f"agentrl rollout: error: --out {out} is in use by `")
            and f"(pid {first.pid} on " in err[0]
        )
        _, stderr = first.communicate(timeout=600)
        assert first.returncode == 0, stderr[-3000:]
    finally:
        first.kill()
    assert len(canonical(out)) == 11 * 30  # every episode once: no line of a second writer
    assert not file_lock_path(out).exists()
