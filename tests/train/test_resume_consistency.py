"""A resume checks that the run's files agree before it goes on: the log of the steps a checkpoint
comes after (``metrics.jsonl`` for ``step_N``, ``sft.jsonl`` for ``sft_K``) must hold each of them;
a missing or short log is one line naming the file and the steps, and nothing is changed (it used
to go on and end with ``summary.json`` saying ``"steps": 7`` for a 10-step run). Issue 35, row 6."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest
import torch

from agentrl.cli import main
from agentrl.errors import ConfigError, TornLineWarning
from agentrl.rundir import RunDir
from agentrl.train.checkpoint import save_checkpoint
from tests.train.test_checkpoint_integrity import finished_run

pytestmark = pytest.mark.xdist_group("finished_3_steps")  # the run test_checkpoint_integrity trains


@pytest.fixture
def run(tmp_path_factory, tmp_path) -> tuple[Path, Path]:
    """A copy of the finished 3-step run (checkpoints after steps 1, 2 and 3): (config, run dir)."""
    cfg, original = finished_run(tmp_path_factory)
    shutil.copytree(original, tmp_path / "run")
    return cfg, tmp_path / "run"


def _snapshot(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def _resume(cfg: Path, run: Path, capsys) -> list[str]:
    """``agentrl train CFG --resume`` into ``run``, in-process; asserts it failed, returns stderr's lines."""
    assert main(["train", str(cfg), "--set", f"output_dir={run}", "--resume", "--no-progress"]) == 1
    return capsys.readouterr().err.strip().splitlines()


def test_resume_of_a_run_whose_metrics_are_gone_is_one_line_and_changes_nothing(run, capsys):
    """The issue's repro: `rm RUN/metrics.jsonl; agentrl train ... --resume`."""
    cfg, out = run
    (out / "metrics.jsonl").unlink()
    before = _snapshot(out)
    assert _resume(cfg, out, capsys) == [
        f"agentrl train: error: --resume: {out / 'metrics.jsonl'} is missing, and checkpoints/step_00003 "
        "comes after step 3: the run's files disagree; put the run's metrics.jsonl back, or start over "
        "with --overwrite"
    ]
    assert _snapshot(out) == before  # no summary of 1 step, no truncated logs


def test_resume_of_a_run_whose_metrics_lack_steps_names_them(run, capsys):
    cfg, out = run
    rows = (out / "metrics.jsonl").read_text().splitlines()
    (out / "metrics.jsonl").write_text(rows[0] + "\n")
    err = _resume(cfg, out, capsys)
    assert len(err) == 1 and f"{out / 'metrics.jsonl'} lacks steps 2-3, and checkpoints/step_00003" in err[0]
    (out / "metrics.jsonl").write_text(rows[0] + "\n" + rows[2] + "\n")  # a line lost in the middle
    with pytest.raises(ConfigError, match=r"metrics\.jsonl lacks steps 2, and checkpoints/step_00003 comes"):
        RunDir(out).resume_checkpoint()


def test_logs_that_cover_the_checkpoint_let_the_resume_go_on(run):
    """Rows after the checkpoint (a run killed after logging a step it did not checkpoint) and a
    torn last line (killed mid-write) are no disagreement: the trainer forgets and recomputes them."""
    _, out = run
    shutil.rmtree(out / "checkpoints" / "step_00003")
    with open(out / "metrics.jsonl", "a") as f:
        f.write('{"step": 4, "tor')
    with pytest.warns(TornLineWarning):  # noted by the trainer's own read of the log ...
        RunDir(out).metrics()
    with warnings.catch_warnings():  # ... not a second time here
        warnings.simplefilter("error")
        assert RunDir(out).resume_checkpoint() == out / "checkpoints" / "step_00002"


def test_a_warm_start_checkpoint_needs_the_warm_start_losses_before_it(tmp_path):
    """``sft_K`` comes after warm-start steps 1…K: ``sft.jsonl`` holds them; RL step 0 (the end of
    the warm start) comes after no RL step, so it needs no metrics."""
    run = RunDir(tmp_path)
    run.tokenizer_dir.mkdir()  # a run's checkpoints come with its tokenizer (check_tokenizer)
    (run.tokenizer_dir / "tokenizer.json").write_text("{}")
    save_checkpoint(run.checkpoints_dir, 0, {"w": torch.zeros(3)}, name="sft_00004")
    with pytest.raises(
        ConfigError, match=r"sft\.jsonl is missing, and checkpoints/sft_00004 comes after step 4"
    ):
        run.resume_checkpoint()
    for k in (1, 2):
        run.append_sft({"sft/step": k, "sft/loss": 1.0})
    with pytest.raises(ConfigError, match=r"sft\.jsonl lacks steps 3-4, and checkpoints/sft_00004"):
        run.resume_checkpoint()
    for k in (3, 4):
        run.append_sft({"sft/step": k, "sft/loss": 1.0})
    assert run.resume_checkpoint() == run.checkpoints_dir / "sft_00004"
    save_checkpoint(run.checkpoints_dir, 0, {"w": torch.zeros(3)})
    assert not run.metrics_file.exists() and run.resume_checkpoint() == run.checkpoint_dir(0)
    run.append_metrics({"step": 1.0})  # an older run's float steps count too
    save_checkpoint(run.checkpoints_dir, 1, {"w": torch.zeros(3)})
    assert run.resume_checkpoint() == run.checkpoint_dir(1)
    assert json.loads((run.checkpoint_dir(1) / "meta.json").read_text())["step"] == 1


def test_an_rl_checkpoint_of_a_warm_started_run_needs_the_warm_start_losses_too(tmp_path):
    """A run that warm-started (its config.json says sft_steps: 2) logged those steps before any RL
    checkpoint: without them a resume would end with a report that lacks the warm start's curve."""
    run = RunDir(tmp_path)
    run.tokenizer_dir.mkdir()
    (run.tokenizer_dir / "tokenizer.json").write_text("{}")
    run.config_file.write_text(json.dumps({"sft_steps": 2, "steps": 4}))
    save_checkpoint(run.checkpoints_dir, 1, {"w": torch.zeros(3)})
    run.append_metrics({"step": 1})
    with pytest.raises(
        ConfigError,
        match=r"sft\.jsonl is missing, and checkpoints/step_00001 comes after the warm start's 2 steps",
    ):
        run.resume_checkpoint()
    run.append_sft({"sft/step": 1, "sft/loss": 1.0})
    with pytest.raises(ConfigError, match=r"sft\.jsonl lacks steps 2, and checkpoints/step_00001"):
        run.resume_checkpoint()
    run.append_sft({"sft/step": 2, "sft/loss": 1.0})
    assert run.resume_checkpoint() == run.checkpoint_dir(1)
