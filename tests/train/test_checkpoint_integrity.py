"""A checkpoint is verified before it is trusted: each one records its files' sizes and sha256
(``manifest.json``, written after them); ``--resume`` names a damaged latest checkpoint in a note and
goes on from the previous intact one, exactly as an uninterrupted run; with none intact it is one
line naming the file, and nothing is changed; a checkpoint written before manifests existed still
loads (a load error is the damage); ``agentrl eval --policy hf:RUN`` names a damaged checkpoint.
Issue 35, row 2."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest
import torch
import yaml

from agentrl.cli import main
from agentrl.errors import AgentRLWarning, ConfigError
from agentrl.rundir import MANIFEST, STATE, RunDir, checkpoint_damage, write_checkpoint_manifest
from agentrl.train import Trainer, load_train_config
from agentrl.train.checkpoint import save_checkpoint
from tests.train.learning_signal import assert_learning_signal, config_dict

pytestmark = pytest.mark.xdist_group("finished_3_steps")  # one worker trains the run once

_BUILT: dict[str, tuple[Path, Path]] = {}


def finished_run(tmp_path_factory) -> tuple[Path, Path]:
    """A 3-step GRPO run with a checkpoint after each step (all three kept), trained once per
    session (``test_resume_consistency`` and ``test_overwrite_layout`` use it too): (config, run)."""
    if "run" not in _BUILT:
        base = tmp_path_factory.mktemp("finished")
        cfg = base / "cfg.yaml"
        data = config_dict(
            output_dir=str(base / "run"), steps=3, sft_steps=0, checkpoint_every=1, checkpoint_keep=3
        )
        cfg.write_text(yaml.safe_dump(data))
        Trainer(load_train_config(cfg), progress=False).run()
        assert_learning_signal(base / "run", 3)  # step 3 moved the policy: a resume that skips it differs
        _BUILT["run"] = (cfg, base / "run")
    return _BUILT["run"]


@pytest.fixture
def finished(tmp_path_factory) -> tuple[Path, Path]:
    return finished_run(tmp_path_factory)


def _copy(finished, tmp_path: Path) -> tuple[Path, Path]:
    cfg, original = finished
    run = tmp_path / "run"
    shutil.copytree(original, run)
    return cfg, run


def _snapshot(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def _truncate(file: Path, size: int = 100_000) -> None:
    file.write_bytes(file.read_bytes()[:size])


def test_a_checkpoint_records_each_files_size_and_hash_and_any_change_is_named(tmp_path):
    d = save_checkpoint(tmp_path, 4, {"w": torch.arange(1000.0)})
    listed = json.loads((d / MANIFEST).read_text())["files"]
    assert set(listed) == {STATE, "meta.json"}
    assert listed[STATE]["size"] == (d / STATE).stat().st_size and len(listed[STATE]["sha256"]) == 64
    assert checkpoint_damage(d) is None
    good = (d / STATE).read_bytes()
    _truncate(d / STATE, 1000)  # `head -c` over it
    assert checkpoint_damage(d) == f"{d / STATE}: 1000 bytes, where {len(good)} were written"
    (d / STATE).write_bytes(good[:-1] + bytes([good[-1] ^ 1]))  # one bit flipped: the same size
    assert checkpoint_damage(d) == f"{d / STATE}: its sha256 is not the one recorded when it was written"
    (d / STATE).write_bytes(good)
    assert checkpoint_damage(d) is None
    (d / "meta.json").unlink()
    assert checkpoint_damage(d) == f"{d / 'meta.json'}: missing (the manifest lists it)"
    (d / MANIFEST).write_text("{")
    assert checkpoint_damage(d).startswith(f"{d / MANIFEST}: not a checkpoint manifest")


def test_the_manifest_covers_fsdp_shards_too(tmp_path):
    """Every rank's shards (``sharded/``, written before ``state.pt``) are listed and checked."""
    (tmp_path / "shards" / "sharded").mkdir(parents=True)
    (tmp_path / "shards" / "sharded" / "__0_0.distcp").write_bytes(b"rank 0's shard")
    (tmp_path / "shards" / "sharded" / ".metadata").write_bytes(b"plan")
    (tmp_path / "shards" / STATE).write_bytes(b"state")
    write_checkpoint_manifest(tmp_path / "shards")
    listed = json.loads((tmp_path / "shards" / MANIFEST).read_text())["files"]
    assert set(listed) == {STATE, "sharded/__0_0.distcp", "sharded/.metadata"}
    assert checkpoint_damage(tmp_path / "shards") is None
    (tmp_path / "shards" / "sharded" / "__0_0.distcp").write_bytes(b"rank 0's shaRd")
    assert checkpoint_damage(tmp_path / "shards") == (
        f"{tmp_path / 'shards' / 'sharded' / '__0_0.distcp'}: its sha256 is not the one recorded when it was written"
    )


def test_a_checkpoint_without_a_manifest_is_trusted_when_torch_loads_it(tmp_path):
    """Written by an older agentrl: no manifest. It loads, so it is trusted; cut short, overwritten
    with garbage, or a zip archive torch cannot read, it is damaged (never torch's words about mmap)."""
    d = save_checkpoint(tmp_path, 2, {"w": torch.arange(1000.0)})
    (d / MANIFEST).unlink()
    assert checkpoint_damage(d) is None
    good = (d / STATE).read_bytes()
    _truncate(d / STATE, len(good) // 2)
    assert checkpoint_damage(d) == f"{d / STATE}: not a torch checkpoint archive (cut short or overwritten)"
    (d / STATE).write_bytes(b"\x00garbage" * 1000)
    assert "not a torch checkpoint archive" in checkpoint_damage(d)
    with zipfile.ZipFile(d / STATE, "w") as z:
        z.writestr("archive/data.pkl", b"not a pickle")
    assert checkpoint_damage(d).startswith(f"{d / STATE}: cannot be loaded (")


def test_resume_goes_on_from_the_previous_intact_checkpoint_and_names_the_damaged_one(finished, tmp_path):
    """The issue's repro: `head -c 100000` over the latest state.pt, then --resume. The run goes on
    from step 2 and ends with the uninterrupted run's weights and metrics."""
    cfg, run = _copy(finished, tmp_path)
    damaged = run / "checkpoints" / "step_00003" / STATE
    _truncate(damaged)
    with pytest.warns(
        AgentRLWarning, match=rf"damaged checkpoint {damaged}: 100000 bytes.*going on from step_00002"
    ):
        Trainer(load_train_config(cfg, {"output_dir": str(run)}), progress=False).run(resume=True)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    straight = [json.loads(line) for line in (finished[1] / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for key in ("critic/score/mean", "actor/pg_loss", "actor/grad_norm"):
        assert rows[2][key] == pytest.approx(straight[2][key], rel=1e-5, abs=1e-7), key
    ours = torch.load(damaged, weights_only=False)["model"]  # rewritten by the resumed run
    theirs = torch.load(finished[1] / "checkpoints" / "step_00003" / STATE, weights_only=False)["model"]
    assert all(torch.equal(v, ours[k]) for k, v in theirs.items())
    assert checkpoint_damage(damaged.parent) is None
    assert json.loads((run / "summary.json").read_text())["steps"] == 3


def test_older_checkpoints_without_a_manifest_are_verified_by_loading_them(finished, tmp_path):
    _, run = _copy(finished, tmp_path)
    for d in RunDir(run).complete_in(run / "checkpoints"):
        (d / MANIFEST).unlink()
    assert RunDir(run).resume_checkpoint() == run / "checkpoints" / "step_00003"
    garbage = run / "checkpoints" / "step_00003" / STATE
    garbage.write_bytes(b"\x8a" * 5000)
    with pytest.warns(AgentRLWarning, match=rf"{garbage}: not a torch checkpoint archive.*from step_00002"):
        assert RunDir(run).resume_checkpoint() == run / "checkpoints" / "step_00002"


def test_resume_with_no_intact_checkpoint_is_one_line_naming_the_file_and_changes_nothing(
    finished, tmp_path, capsys
):
    cfg, run = _copy(finished, tmp_path)
    latest = run / "checkpoints" / "step_00003" / STATE
    size = latest.stat().st_size
    for d in RunDir(run).complete_in(run / "checkpoints"):
        _truncate(d / STATE)
    before = _snapshot(run)
    assert main(["train", str(cfg), "--set", f"output_dir={run}", "--resume", "--no-progress"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"agentrl train: error: --resume: no intact checkpoint to go on from: {latest}: 100000 bytes, where "
        f"{size} were written (and the 2 before it); start over with --overwrite"
    ]
    assert _snapshot(run) == before


def test_a_damaged_state_file_that_passed_the_check_is_one_line_too(finished, tmp_path):
    """A file damaged after it was verified (the last line of defence): a ConfigError naming it."""
    from agentrl.train.checkpoint import load_checkpoint

    _, run = _copy(finished, tmp_path)
    d = run / "checkpoints" / "step_00003"
    (d / STATE).write_bytes(b"garbage")
    with pytest.raises(ConfigError, match=rf"^{d / STATE}: a damaged checkpoint \("):
        load_checkpoint(d)
    (run / "config.json").unlink()  # a reader that falls back to the latest checkpoint's config
    with pytest.raises(
        ConfigError, match=rf"no config\.json, and its latest checkpoint is damaged: {d / STATE}: "
    ):
        RunDir(run).config()


def test_eval_of_a_run_whose_latest_checkpoint_is_damaged_is_one_line_naming_it(finished, tmp_path, capsys):
    _, run = _copy(finished, tmp_path)
    damaged = run / "checkpoints" / "step_00003" / STATE
    damaged.write_bytes(b"\x8a" * damaged.stat().st_size)  # garbage of the same size
    args = [
        "eval",
        "--policy",
        f"hf:{run}",
        "--limit",
        "1",
        "--out",
        str(tmp_path / "e.jsonl"),
        "--no-progress",
    ]
    assert main(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"agentrl eval: error: hf:{run}: damaged checkpoint {damaged}: its sha256 is not the one recorded "
        "when it was written; point hf: at another checkpoint of the run (step_00002, step_00001)"
    ]
    assert "_use_new_zipfile_serialization" not in err[0]
    assert not (tmp_path / "e.jsonl").exists()


def test_resume_without_the_runs_tokenizer_is_one_line_and_writes_nothing(finished, tmp_path, capsys):
    """The checkpoints' embeddings are rows of the run's tokenizer: a resume refuses before it would
    train or load another one (it retrained one and crashed on the embeddings' shape)."""
    cfg, run = _copy(finished, tmp_path)
    shutil.rmtree(run / "tokenizer")
    before = _snapshot(run)
    assert main(["train", str(cfg), "--set", f"output_dir={run}", "--resume", "--no-progress"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"agentrl train: error: --resume: {run / 'tokenizer'} is missing, and checkpoints/step_00003 was "
        "trained with the run's tokenizer: the run's files disagree; put the run's tokenizer/ back, or "
        "start over with --overwrite"
    ]
    assert _snapshot(run) == before


def test_resume_with_another_model_is_one_line_naming_what_differs(finished, tmp_path, capsys):
    cfg, run = _copy(finished, tmp_path)
    data = yaml.safe_load(cfg.read_text())
    other = tmp_path / "other"
    shutil.copytree(data["model"]["path"], other)  # the answering model, one layer more
    conf = json.loads((other / "config.json").read_text())
    conf["num_hidden_layers"] += 1
    if "layer_types" in conf:
        conf["layer_types"] = conf["layer_types"] + conf["layer_types"][-1:]
    (other / "config.json").write_text(json.dumps(conf))
    args = ["train", str(cfg), "--set", f"output_dir={run}", "--set", f"model.path={other}"]
    assert main([*args, "--resume", "--no-progress"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(
        f"agentrl train: error: --resume: {run / 'checkpoints' / 'step_00003'} does not fit the model "
        "the config builds ("
    ), err
    assert " weights it lacks, e.g. model.layers.1." in err, err
    assert err.endswith(
        "resume with the run's model settings (its config.json), or start over with --overwrite"
    )
