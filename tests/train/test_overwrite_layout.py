"""``agentrl train --overwrite`` deletes only the files the run layout lists (``agentrl.rundir.LAYOUT``),
anywhere in the tree: any other file or folder, at the top or deep inside ``trajectories/`` or a
checkpoint, makes it refuse in one line naming the path, and nothing is deleted. Issue 35, row 1
(a user's ``trajectories/my_handpicked.jsonl`` was deleted)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from agentrl.cli import main
from agentrl.errors import ConfigError
from agentrl.rundir import LAYOUT, RunDir, in_layout
from agentrl.train.preflight import check_output_dir, prepare_output_dir
from tests.train.test_checkpoint_integrity import finished_run

pytestmark = pytest.mark.xdist_group("finished_3_steps")  # the run test_checkpoint_integrity trains

#: One file for each LAYOUT pattern, and the leftovers of interrupted writes.
LAID_OUT = [
    "config.json", "metrics.jsonl", "sft.jsonl", "summary.json", "reward_curve.png", "report.html",
    "sampling.json", "tokenizer/tokenizer.json", "tokenizer/chat_template.jinja",
    "tokenizer/tokenizer_config.json", "tokenizer/merges.txt", "tokenizer/qwen.tiktoken",
    "tokenizer/special_tokens_map.json", "tokenizer/added_tokens.json", "tokenizer/chat_template.json",
    "tokenizer/additional_chat_templates/tool_use.jinja", "tokenizer/vocab.json", "tokenizer/vocab.txt",
    "tokenizer/tokenizer.model", "tokenizer/spiece.model", "tokenizer/sentencepiece.bpe.model",
    "tensorboard/events.out.tfevents.1.host.7.0", "vllm_sync/model.safetensors",
    "vllm_sync/lora-step00002/adapter_model.safetensors", "trajectories/step_00001.jsonl",
    "tokens/step_00001.npz", "eval/step_00000.jsonl", "audit/step_00001.jsonl",
    "checkpoints/step_00001/state.pt", "checkpoints/step_00001/meta.json",
    "checkpoints/step_00001/manifest.json", "checkpoints/sft_00025/sharded/__0_0.distcp",
    "checkpoints/sft_00025/sharded/.metadata", "checkpoints/.step_00002.tmp/state.pt",
    ".summary.json.tmp-4242", "trajectories/.step_00002.jsonl.tmp-4242", "tokens/.step_00002.npz.tmp-9",
]  # fmt: skip
#: Files of the user's, each of which alone makes --overwrite refuse (the path it is named by).
FOREIGN = {
    "trajectories/my_handpicked.jsonl": "trajectories/my_handpicked.jsonl",  # the issue's repro
    "trajectories/step_00001.jsonl.orig": "trajectories/step_00001.jsonl.orig",
    "trajectories/.mine.tmp-12": "trajectories/.mine.tmp-12",
    "trajectories/kept/step_00001.jsonl": "trajectories/kept",
    "checkpoints/step_00001/notes.txt": "checkpoints/step_00001/notes.txt",
    "checkpoints/best/state.pt": "checkpoints/best",
    "eval/summary.md": "eval/summary.md",
    "tokens/step_00001.npz.bak": "tokens/step_00001.npz.bak",
    "tokenizer/extra/vocab.txt": "tokenizer/extra",
    "tokenizer/vocab_custom.txt": "tokenizer/vocab_custom.txt",  # the tokenizer's files are named ones
    "tensorboard/my_notes.txt": "tensorboard/my_notes.txt",  # so are TensorBoard's
    "notes.txt": "notes.txt",
    ".env": ".env",
    "plots/curve.png": "plots",
}


def _tree(root: Path, paths: list[str]) -> None:
    for rel in paths:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(rel)


def _snapshot(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_every_layout_pattern_is_agentrls_and_overwrite_deletes_it_all(tmp_path):
    assert len(LAYOUT) <= len(LAID_OUT)  # (a new LAYOUT entry deserves a file here)
    _tree(tmp_path, [*LAID_OUT, "config.yaml", ".agentrl.lock"])
    ours, foreign = RunDir(tmp_path).entries()
    assert foreign == []
    assert set(ours) == {p.split("/")[0] for p in LAID_OUT}
    check_output_dir(tmp_path, overwrite=True)
    assert set(prepare_output_dir(tmp_path, overwrite=True)) == set(ours)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".agentrl.lock",
        "config.yaml",
    ]  # the user's, the lock


@pytest.mark.parametrize("rel", list(FOREIGN))
def test_a_file_agentrl_did_not_write_anywhere_makes_overwrite_refuse_naming_it(tmp_path, rel):
    _tree(tmp_path, [*LAID_OUT, rel])
    assert not in_layout(rel)
    before = _snapshot(tmp_path)
    assert RunDir(tmp_path).entries()[1] == [FOREIGN[rel]]
    named = rf"did not write \({re.escape(FOREIGN[rel])}\): not deleting it"
    with pytest.raises(
        ConfigError, match=rf"^--overwrite: output_dir {tmp_path} holds files agentrl {named}"
    ):
        check_output_dir(tmp_path, overwrite=True)
    with pytest.raises(ConfigError, match=named):
        prepare_output_dir(tmp_path, overwrite=True)
    assert _snapshot(tmp_path) == before


def test_the_issues_repro_a_users_file_in_a_real_runs_trajectories_is_refused_in_one_line(
    tmp_path_factory, tmp_path, capsys
):
    cfg, original = finished_run(tmp_path_factory)
    run = tmp_path / "ow"
    shutil.copytree(original, run)
    assert RunDir(run).entries()[1] == []  # everything a real run writes is in the layout
    (run / "trajectories" / "my_handpicked.jsonl").write_text("mine\n")
    before = _snapshot(run)
    capsys.readouterr()  # what training the run printed
    args = ["train", str(cfg), "--set", f"output_dir={run}", "--overwrite", "--set", "steps=0"]
    assert main([*args, "--no-progress"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"agentrl train: error: --overwrite: output_dir {run} holds files agentrl did not write "
        "(trajectories/my_handpicked.jsonl): not deleting it; choose another output_dir"
    ]
    assert _snapshot(run) == before
    (run / "trajectories" / "my_handpicked.jsonl").unlink()
    deleted = prepare_output_dir(run, overwrite=True)  # the real run alone: all of it goes
    assert "trajectories" in deleted and "checkpoints" in deleted and not any(run.iterdir())


def test_a_resume_forgets_only_the_later_steps_files_that_agentrl_wrote(tmp_path):
    _tree(
        tmp_path, ["trajectories/step_00001.jsonl", "trajectories/step_00003.jsonl", "tokens/step_00003.npz"]
    )
    _tree(tmp_path, ["trajectories/.step_00004.jsonl.tmp-7", "trajectories/step_00003.backup.jsonl"])
    _tree(tmp_path, ["trajectories/.notes.tmp-1"])
    RunDir(tmp_path).forget_after(2)
    left = sorted(p.name for p in (tmp_path / "trajectories").iterdir())
    assert left == [".notes.tmp-1", "step_00001.jsonl", "step_00003.backup.jsonl"]
    assert not any((tmp_path / "tokens").iterdir())
