"""``agentrl train`` as a user runs it (a subprocess, the tiny trainer config): a second run into a
used directory is refused and changes nothing, ``--overwrite`` starts over cleanly, a resume after
torn logs goes on from whole lines, ``step`` is an integer, config and path errors are one line
within seconds and leave no file behind, and ``--no-progress`` prints every phase and every step.
The runs after the first go through ``Trainer.run`` in-process (the same checks; no interpreter and
torch start-up per run)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from agentrl.errors import ConfigError
from agentrl.rundir import RunDir
from agentrl.train import Trainer, load_train_config
from agentrl.trajectory import read_trajectories
from tests.train.learning_signal import config_dict

ROOT = Path(__file__).resolve().parents[2]


def _train(cfg: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "agentrl", "train", str(cfg), "--no-progress", *args]
    return subprocess.run(cmd, cwd=cwd or ROOT, env=env, capture_output=True, text=True, timeout=300)


def _one_line_error(proc: subprocess.CompletedProcess, *parts: str) -> str:
    """The process failed with exactly one line on stderr, naming every one of ``parts``."""
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("agentrl train: error: "), proc.stderr[-2000:]
    assert all(p in lines[0] for p in parts), lines[0]
    return lines[0]


def _snapshot(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def _steps(run: Path) -> list:
    return [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A 2-step run with a checkpoint after each step, trained with ``--overwrite`` over an older
    3-step run: (its config, its directory, the process)."""
    base = tmp_path_factory.mktemp("train_cli")
    cfg = base / "cfg.yaml"
    data = config_dict(output_dir=str(base / "run"), steps=2, sft_steps=2, sft_episodes=8, checkpoint_every=1)
    cfg.write_text(yaml.safe_dump(data))
    old = RunDir(base / "run")
    old.path.mkdir()
    for step in (1, 2, 3):
        old.append_metrics({"step": step})
    old.checkpoint_dir(3).mkdir(parents=True)
    (old.checkpoint_dir(3) / "state.pt").write_bytes(b"an older run's checkpoint")
    proc = _train(cfg, "--overwrite")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return cfg, base / "run", proc


def test_overwrite_and_no_progress_print_each_phase_and_a_line_per_step_and_steps_are_integers(finished):
    _, run, proc = finished
    err = proc.stderr
    for phase in ("oracle episodes for the warm start (8)", "tokenizer (", "models ("):
        starts = [line for line in err.splitlines() if line.startswith(phase) and line.endswith(" ...")]
        ends = [line for line in err.splitlines() if line.startswith(phase) and ": done in " in line]
        assert len(starts) == 1 and len(ends) == 1, (phase, err)
    assert "warm start: 2 supervised steps" in err
    assert [line.split(":")[0] for line in err.splitlines() if line.startswith("warm start ")] == [
        "warm start 1/2",
        "warm start 2/2",
    ]
    assert "loss " in err.split("warm start 2/2")[1].splitlines()[0]
    step_lines = [line for line in err.splitlines() if line.startswith("step ")]
    assert [line.split(":")[0] for line in step_lines] == ["step 1/2", "step 2/2"], err
    assert all("reward " in s and "rollout " in s and "judge " in s and "update " in s for s in step_lines)
    assert json.loads(proc.stdout)["steps"] == 2  # stdout holds the summary alone
    steps = _steps(run)
    assert steps == [1, 2] and all(type(s) is int for s in steps)
    # --overwrite deleted the older run first: none of its steps or checkpoints is left
    assert f"output_dir {run}: deleted the earlier run (checkpoints, metrics.jsonl)" in err
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [
        "step_00000",
        "step_00001",
        "step_00002",
    ]


def test_a_second_run_into_a_used_directory_is_refused_and_overwrite_starts_over(finished, tmp_path):
    cfg, original, _ = finished
    run = tmp_path / "run"
    shutil.copytree(original, run)
    before = _snapshot(run)
    proc = _train(cfg, "--set", f"output_dir={run}")
    _one_line_error(proc, str(run), "already holds a run", "--resume", "--overwrite")
    with pytest.raises(ConfigError, match="already holds a run"):  # the Python API refuses too
        Trainer(load_train_config(cfg, {"output_dir": str(run)})).run()
    assert _snapshot(run) == before  # nothing appended, nothing deleted
    (run / "mine.txt").write_text("not agentrl's")
    proc = _train(cfg, "--set", f"output_dir={run}", "--overwrite")
    _one_line_error(proc, "--overwrite", "mine.txt", "not deleting it")
    (run / "mine.txt").unlink()
    assert _snapshot(run) == before
    Trainer(load_train_config(cfg, {"output_dir": str(run), "steps": 1}), progress=False).run(overwrite=True)
    # the old run is gone: one step, one checkpoint, one step of trajectories
    assert _steps(run) == [1]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_00000", "step_00001"]
    assert sorted(p.name for p in (run / "trajectories").iterdir()) == ["step_00001.jsonl"]
    assert json.loads((run / "summary.json").read_text())["steps"] == 1


def test_resume_after_torn_logs_appends_whole_lines_and_recomputes_the_lost_step(finished, tmp_path, capsys):
    """Killed after step 2's logs but before its checkpoint, with every log torn: the resume cuts
    the torn tails, replaces step 2's trajectories, and its step 2 equals the uninterrupted one."""
    cfg, original, _ = finished
    run = tmp_path / "run"
    shutil.copytree(original, run)
    shutil.rmtree(run / "checkpoints" / "step_00002")
    straight = json.loads((run / "metrics.jsonl").read_text().splitlines()[1])
    for name in ("metrics.jsonl", "sft.jsonl", "trajectories/step_00002.jsonl"):
        with open(run / name, "ab") as f:
            f.write(b'{"step": 3, "torn')
    # what a longer earlier attempt left: a later step's files, an interrupted atomic write
    shutil.copy(run / "trajectories" / "step_00001.jsonl", run / "trajectories" / "step_00003.jsonl")
    shutil.copy(run / "tokens" / "step_00001.npz", run / "tokens" / "step_00003.npz")
    (run / "trajectories" / ".step_00003.jsonl.tmp-4242").write_text("{")
    Trainer(load_train_config(cfg, {"output_dir": str(run)}), progress=False).run(resume=True)
    assert "resumed after step 1" in capsys.readouterr().err
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for key in ("critic/score/mean", "actor/pg_loss", "actor/grad_norm"):
        assert rows[1][key] == pytest.approx(straight[key], rel=1e-5, abs=1e-7), key
    sft = [json.loads(line) for line in (run / "sft.jsonl").read_text().splitlines()]
    assert [r["sft/step"] for r in sft] == [1, 2]
    step2 = run / "trajectories" / "step_00002.jsonl"
    assert step2.read_bytes().endswith(b"\n") and len(list(read_trajectories(step2))) == 4
    assert sorted(p.name for p in (run / "trajectories").iterdir()) == [
        "step_00001.jsonl",
        "step_00002.jsonl",
    ]
    assert sorted(p.name for p in (run / "tokens").iterdir()) == ["step_00001.npz", "step_00002.npz"]


def test_a_setup_that_fails_leaves_no_output_dir_behind(finished, tmp_path):
    """A model directory that passes the checks (it has a config.json) but cannot be loaded: the
    error is one line naming the field, and the directory the run had created is gone."""
    cfg, _, _ = finished
    model = tmp_path / "not-a-model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "qwen2"}')
    tokenizer = load_train_config(cfg).model.path  # a real tokenizer: setup gets as far as the models
    over = {"output_dir": str(tmp_path / "out"), "model.path": str(model), "model.tokenizer": tokenizer}
    with pytest.raises(ConfigError, match=r"^model\.path '.*not-a-model': cannot load it: "):
        Trainer(load_train_config(cfg, over), progress=False).run()
    assert not (tmp_path / "out").exists()


def test_resume_with_nothing_to_resume_is_one_line(finished, tmp_path):
    cfg, _, _ = finished
    proc = _train(cfg, "--set", f"output_dir={tmp_path / 'missing'}", "--resume")
    _one_line_error(proc, "--resume", str(tmp_path / "missing"), "does not exist")
    assert not (tmp_path / "missing").exists()


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        (
            "steps: 1\nrollout:\n  group_size: 2\n  group_size: 3\n",
            ["cfg.yaml:4:3", "rollout.group_size", "duplicate key"],
        ),
        ("steps: 1\n# caf\xe9\n", ["cfg.yaml:2", "not UTF-8"]),
        ("model:\n  path: /nonexistent\n", ["cfg.yaml:2:3", "model.path '/nonexistent'", "not found"]),
        ("judge:\n  rubric: missing_rubric.yaml\n", ["judge.rubric 'missing_rubric.yaml'", "not found"]),
        ("rollout:\n  suite: no-such-suite\n", ["rollout.suite 'no-such-suite'", "not found"]),
    ],
    ids=["duplicate-key", "not-utf8", "model-path", "rubric", "suite"],
)
def test_config_errors_are_one_line_within_seconds_and_write_nothing(tmp_path, text, parts):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_bytes(text.encode("latin-1") + f"output_dir: {tmp_path / 'out'}\n".encode())
    t0 = time.monotonic()
    proc = _train(cfg, cwd=tmp_path)
    elapsed = time.monotonic() - t0
    _one_line_error(proc, *parts)
    assert elapsed < 5, elapsed  # no setup ran (setup alone takes seconds; the quickstart's, minutes)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cfg.yaml"]


def test_a_copied_quickstart_config_says_where_it_looked(tmp_path):
    """The quickstart's config copied without its suite: the error names the config line and both
    places it looked; with the suite beside it, it passes every check from any directory."""
    cfg = tmp_path / "quickstart.yaml"
    shutil.copy(ROOT / "examples" / "quickstart.yaml", cfg)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = _train(cfg, cwd=elsewhere)
    line = _one_line_error(proc, "rollout.suite 'quickstart-worlds'", "not found")
    assert str(elsewhere / "quickstart-worlds") in line and str(tmp_path / "quickstart-worlds") in line
    assert sorted(p.name for p in elsewhere.iterdir()) == []  # no runs/quickstart left behind
    shutil.copytree(ROOT / "examples" / "quickstart-worlds", tmp_path / "quickstart-worlds")
    line = _one_line_error(
        _train(cfg, cwd=elsewhere), "eval.suite 'quickstart-env'", "not found"
    )  # the next one
    shutil.copytree(ROOT / "examples" / "quickstart-env", tmp_path / "quickstart-env")
    proc = _train(cfg, "--print-config", cwd=elsewhere)
    assert proc.returncode == 0, proc.stderr
    printed = yaml.safe_load(proc.stdout)
    assert printed["rollout"]["suite"] == str(tmp_path / "quickstart-worlds")
    assert printed["eval"]["suite"] == str(tmp_path / "quickstart-env")
