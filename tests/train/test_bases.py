"""``base:NAME``: the bases agentrl ships, named in a config's ``model.path`` or as ``--policy
hf:base:NAME``, become their directory in one place (``agentrl.learn.bases``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrl.errors import ConfigError
from agentrl.learn import bases
from agentrl.train.config import ModelConfig, load_train_config


@pytest.fixture
def shipped(tmp_path, monkeypatch):
    """A bases directory holding one base, ``base:mini`` (its config.json is all resolution reads)."""
    (tmp_path / "mini").mkdir()
    (tmp_path / "mini" / "config.json").write_text(json.dumps({"model_type": "llama"}), encoding="utf-8")
    (tmp_path / "not-a-model").mkdir()
    monkeypatch.setattr(bases, "BASES_DIR", tmp_path)
    return tmp_path


def test_a_base_name_is_its_directory(shipped):
    assert bases.base_names() == ["mini"]
    assert bases.resolve_base("base:mini") == shipped / "mini"
    assert bases.resolve_model("base:mini") == str(shipped / "mini")
    for other in ("tiny:layers=1", "HuggingFaceTB/SmolLM2-135M-Instruct", "runs/x"):
        assert bases.resolve_model(other) == other


@pytest.mark.parametrize("name", ["nope", "", "not-a-model", "../mini", "mini/..", ".", "mini/"])
def test_an_unknown_base_is_an_error_naming_the_bases(shipped, name):
    with pytest.raises(ConfigError, match=r"no such base \(bases: base:mini\)"):
        bases.resolve_base("base:" + name)


def test_a_config_names_a_base(shipped, tmp_path):
    assert ModelConfig(path="base:mini").path == str(shipped / "mini")
    # saved, it names the base again (not this machine's install), and reads back resolved
    assert ModelConfig(path="base:mini").model_dump()["path"] == "base:mini"
    assert ModelConfig.model_validate(ModelConfig(path="base:mini").model_dump()).path == str(
        shipped / "mini"
    )
    assert ModelConfig(path=str(tmp_path)).model_dump()["path"] == str(tmp_path)
    assert bases.spec_of(str(shipped / "not-a-model")) == str(shipped / "not-a-model")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model:\n  path: base:mini\n", encoding="utf-8")
    assert load_train_config(cfg).model.path == str(shipped / "mini")
    assert load_train_config(cfg, {"model.path": "tiny:layers=1"}).model.path == "tiny:layers=1"
    cfg.write_text("steps: 1\nmodel:\n  path: base:nope\n", encoding="utf-8")
    with pytest.raises(
        ConfigError, match=r"c\.yaml:3:3: model\.path: 'base:nope': agentrl ships no such base"
    ):
        load_train_config(cfg)
    with pytest.raises(ConfigError, match=r"--set model\.path=base:other: .*no such base"):
        load_train_config(tmp_path / "c.yaml", {"model.path": "base:other"})


def test_the_shipped_bases_are_package_data():
    # the weights travel with a wheel (pyproject's package-data), and every shipped base has a card
    text = (Path(bases.__file__).parents[2] / "pyproject.toml").read_text(encoding="utf-8")
    assert '"*.safetensors"' in text and '"*.jinja"' in text  # the weights and the chat template
    assert "research-tiny" in bases.base_names()
    for name in bases.base_names():
        there = bases.resolve_base("base:" + name)
        assert (there / "card.json").is_file() and (there / "model.safetensors").is_file()


def test_the_research_base_samples_as_hf_base(tmp_path):
    """``--policy hf:base:research-tiny``: the shipped base researches two held-out tasks of the
    quickstart's sandbox (companies its data never named): it calls tools, and the trajectories name
    the base."""
    from agentrl.cli import main as cli
    from agentrl.trajectory import read_trajectories

    out = tmp_path / "r.jsonl"
    suite = Path(bases.__file__).parents[2] / "examples" / "quickstart-env"
    args = ["rollout", "--policy", "hf:base:research-tiny", "--suite", str(suite), "--split", "heldout"]
    args += ["--limit", "2", "-n", "1", "--temperature", "0.01", "--out", str(out), "--no-progress"]
    assert cli(args) == 0
    trajs = list(read_trajectories(out))
    assert len(trajs) == 2
    assert {t.info["policy"] for t in trajs} == {"hf:base:research-tiny"}  # not this install's path
    assert all(any(m.role == "tool" for m in t.messages) for t in trajs)  # it searched


def test_a_checkpoints_saved_base_name_rebuilds_the_base():
    # a run's checkpoint records model.path as base:NAME (spec_of); rebuilding its policy or critic
    # resolves the name on whatever machine reads it
    from agentrl.learn.models import copy_head_of
    from agentrl.learn.policy_model import rebuild_model

    model = rebuild_model({"path": "base:research-tiny"}, {}, "hf:x: ")
    assert copy_head_of(model) and model.config.num_hidden_layers == 2
