"""``agentrl.yamlload``: the one YAML loader behind training configs and rubrics (and env.yaml,
sandbox.yaml, integration settings, a run's hand-made config.yaml). Both refuse a
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


def _suite_dir(tmp_path, name: str, text: str):
    root = tmp_path / "suite"
    root.mkdir()
    (root / name).write_text(text)
    return root, root / name


def _env_yaml(tmp_path, text):
    from agentrl.env.suite import load_suite

    root, path = _suite_dir(tmp_path, "env.yaml", text)
    return path, lambda: load_suite(root)


def _sandbox_yaml(tmp_path, text):
    from agentrl.env.suite import load_suite

    root, path = _suite_dir(tmp_path, "sandbox.yaml", text)
    return path, lambda: load_suite(root)


def _settings(tmp_path, text):
    from agentrl.integrations.settings import load_settings

    path = tmp_path / "agentrl.yaml"
    path.write_text(text)
    return path, lambda: load_settings(path)


def _run_config(tmp_path, text):
    from agentrl.rundir import RunDir

    (tmp_path / "config.yaml").write_text(text)
    return tmp_path / "config.yaml", lambda: RunDir(tmp_path).config()


# Every other YAML file a user writes, read through the same loader: (a duplicate key, where).
USER_FILES = {
    "env.yaml": (_env_yaml, "budgets:\n  max_tool_calls: 3\nsearch_k: 2\nbudgets: {}\n", 4, 1, "budgets"),
    "sandbox.yaml": (_sandbox_yaml, "seed: 1\ncompanies: 3\nseed: 2\n", 3, 1, "seed"),
    "settings": (_settings, "env:\n  suite: sandbox\n  suite: other\n", 3, 3, "env.suite"),
    "run-config.yaml": (
        _run_config,
        "algorithm:\n  name: ppo\n  gamma: 1\n  name: grpo\n",
        4,
        3,
        "algorithm.name",
    ),
}


@pytest.mark.parametrize(("make", "text", "line", "col", "key"), USER_FILES.values(), ids=list(USER_FILES))
def test_env_sandbox_settings_and_run_configs_refuse_a_duplicate_key_where_it_is(
    tmp_path, make, text, line, col, key
):
    path, load = make(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load()
    assert str(e.value) == f"{path}:{line}:{col}: {key}: duplicate key"


@pytest.mark.parametrize("make", [v[0] for v in USER_FILES.values()], ids=list(USER_FILES))
def test_env_sandbox_settings_and_run_configs_name_the_line_of_bad_yaml(tmp_path, make):
    path, load = make(tmp_path, "a: 1\nb: [1\n")
    with pytest.raises(ConfigError) as e:
        load()
    assert str(e.value).startswith(f"{path}:3:1: not valid YAML") and "\n" not in str(e.value)


def test_the_report_reads_no_texts_from_a_rubric_with_a_duplicate_key(tmp_path):
    from agentrl.explain.report.rubrics import RubricTexts

    good = "id: r\ncriteria:\n  - {id: a, text: first, weight: 1}\n"
    (tmp_path / "r.yaml").write_text(good)
    (tmp_path / "dup.yaml").write_text(good + "id: again\n")
    texts = RubricTexts(tmp_path)
    assert texts._file("r.yaml") == ("r", {"a": ("positive", "first")})
    assert texts._file("dup.yaml") == (None, {})  # as unreadable: the report shows the verdicts anyway
