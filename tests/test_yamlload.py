"""``agentrl.yamlload``: the one YAML loader behind training configs and rubrics. Both refuse a
duplicate key at the same file:line:column, each naming the key its own way (configs dotted,
rubrics indexed), and report YAML errors with the same line."""

from __future__ import annotations

import pytest

from agentrl.errors import ConfigError, RubricError
from agentrl.judge.rubric import load_rubric
from agentrl.train.config import load_train_config
from agentrl.yamlload import dotted, indexed, load_yaml

# (document, line, column, key path) of the duplicate each document holds
DUPLICATES = [
    ("steps: 3\nseed: 1\nsteps: 4\n", 3, 1, ("steps",)),
    ("rollout:\n  max_turns: 2\n  group_size: 2\n  max_turns: 3\n", 4, 3, ("rollout", "max_turns")),
    ("criteria:\n  - id: a\n    text: t\n  - id: b\n    weight: 1\n    id: c\n", 6, 5, ("criteria", 1, "id")),
    ("base: &b {k: 1, j: 2}\nother:\n  x: *b\n  y: *b\n  x: 3\n", 5, 3, ("other", "x")),
]


def _both(path) -> tuple[str, str]:
    """The one-line errors of the config loader and of the rubric loader for the file ``path``."""
    with pytest.raises(ConfigError) as config:
        load_train_config(path)
    with pytest.raises(RubricError) as rubric:
        load_rubric(path)
    return str(config.value), str(rubric.value)


@pytest.mark.parametrize(
    ("text", "line", "col", "key"), DUPLICATES, ids=["top", "nested", "in-a-list", "by-aliases"]
)
def test_configs_and_rubrics_refuse_the_same_duplicate_at_the_same_place(tmp_path, text, line, col, key):
    path = tmp_path / "doc.yaml"
    path.write_text(text)
    config, rubric = _both(path)
    assert config == f"{path}:{line}:{col}: {dotted(key)}: duplicate key"
    assert rubric == f"{path}:{line}:{col}: {indexed(key)}: duplicate key"


def test_key_names_and_positions():
    assert (
        dotted(("criteria", 1, "id")) == "criteria.1.id"
        and indexed(("criteria", 1, "id")) == "criteria[1].id"
    )
    assert dotted(()) == indexed(()) == "<root>"
    data, marks = load_yaml("a: &x {k: 1}\nb: *x\nc:\n  - 1\n  - {d: 2}\n", "s.yaml", error=ConfigError)
    assert data == {"a": {"k": 1}, "b": {"k": 1}, "c": [1, {"d": 2}]}  # an alias is no duplicate
    assert marks[()] == (1, 1) and marks[("b",)] == (2, 1) and marks[("c", 1, "d")] == (5, 6)
    assert load_yaml("", "s.yaml", error=ConfigError) == (None, {})


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("seed: !!int abc\n", "1:7: not valid YAML: cannot read the value 'abc'"),
        ("a: [1\n", "2:1: not valid YAML"),
    ],
)
def test_configs_and_rubrics_report_bad_yaml_alike(tmp_path, text, where):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    config, rubric = _both(path)
    assert config == rubric and config.startswith(f"{path}:{where}")
