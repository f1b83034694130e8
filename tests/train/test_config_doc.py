"""The config reference comes from the code: every field of ``TrainConfig`` has a description,
``docs/config.md`` is exactly what ``agentrl.train.config_doc`` generates from the models, and
``agentrl train --print-config`` prints each field's value under its description as YAML that loads
back as the same config."""

from __future__ import annotations

from pathlib import Path

import yaml

from agentrl.cli import main
from agentrl.train.config import TrainConfig
from agentrl.train.config_doc import REGENERATE, config_markdown, fields

ROOT = Path(__file__).resolve().parents[2]


def test_every_field_has_a_description():
    assert [f.path for f in fields() if not f.description] == []
    assert len(list(fields())) > 150  # every section walked, eval.audit (null by default) included


def test_docs_config_md_is_generated_from_the_models():
    doc = (ROOT / "docs" / "config.md").read_text(encoding="utf-8")
    assert doc == config_markdown(), f"docs/config.md is out of date: regenerate it with `{REGENERATE}`"
    for f in fields():  # each field's row, with its description
        name = f.path.rpartition(".")[2]
        assert any(line.startswith(f"| `{name}` |") and f.description in line for line in doc.splitlines())


def _comments_by_key(text: str) -> dict[str, str]:
    """Dotted key → the comment lines just above it, from an indented YAML text."""
    out: dict[str, str] = {}
    stack: list[str] = []
    comment: list[str] = []
    for line in text.splitlines():
        body = line.lstrip(" ")
        depth = (len(line) - len(body)) // 2
        if body.startswith("# "):
            comment.append(body[2:])
            continue
        key = body.split(":", 1)[0]
        stack = [*stack[:depth], key]
        out[".".join(stack)] = " ".join(comment)
        comment = []
    return out


def test_print_config_shows_each_value_under_its_description(capsys):
    assert (
        main(["train", "--print-config", "--set", "algorithm.name=ppo", "--set", "rollout.max_len=512"]) == 0
    )
    text = capsys.readouterr().out
    cfg = TrainConfig.model_validate({"algorithm": {"name": "ppo"}, "rollout": {"max_len": 512}})
    assert yaml.safe_load(text) == cfg.model_dump(mode="json")
    shown = {f.path: f.description for f in fields() if not f.path.startswith("eval.audit.")}
    assert _comments_by_key(text) == shown  # eval.audit is null: its own line, not its fields
