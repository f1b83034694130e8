"""Rubric YAML: the shipped files load, and every kind of mistake names file:line:column and field."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.errors import RubricError
from agentrl.judge import Rubric, load_rubric, parse_rubric

RUBRICS = Path(__file__).resolve().parents[2] / "rubrics"

BASE = """\
id: demo
version: 1
mapping: strict
criteria:
  - id: accuracy
    text: Gives the figure.
    weight: 1.0
  - id: temporal
    text: Labels it Q1.
    weight: 1.0
"""


@pytest.mark.parametrize("path", sorted(RUBRICS.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_rubrics_load(path):
    rubric = load_rubric(path)
    assert rubric.id == path.stem
    assert len(rubric.content_hash) == 64


def test_reference_rubric_shape():
    r = load_rubric(RUBRICS / "alphabet-2025-q1-cloud.yaml")
    assert [(c.id, c.weight, c.grader.type) for c in r.criteria] == [
        ("accuracy", 1.0, "llm"),
        ("temporal", 1.0, "llm"),
        ("citation", 0.5, "cited_source"),
    ]
    assert (r.mapping, r.aggregation, r.max_score, r.is_deterministic) == (
        "strict",
        "weighted_sum",
        2.5,
        False,
    )
    assert load_rubric(RUBRICS / "alphabet-2025-q1-cloud-offline.yaml").is_deterministic


def test_deep_research_rubric_has_negative_criteria():
    r = load_rubric(RUBRICS / "deep-research-report.yaml")
    negatives = {c.id for c in r.criteria if c.kind == "negative"}
    assert negatives == {"fabrication", "prediction-as-fact"}
    assert all(c.weight < 0 for c in r.criteria if c.kind == "negative")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            BASE + "  - id: rumor\n    kind: negative\n    text: States a rumour.\n    weight: 1.0\n",
            "x.yaml:14:5: criteria[2].weight: a negative criterion needs a negative weight",
        ),
        (
            BASE.replace("weight: 1.0\n  - id: temporal", "weight: 0\n  - id: temporal"),
            "x.yaml:7:5: criteria[0].weight: a positive criterion needs a positive weight",
        ),
        (
            BASE.replace("id: temporal", "id: accuracy"),
            "x.yaml:8:5: criteria[1].id: duplicate criterion id 'accuracy'",
        ),
        (
            BASE.replace("    text: Labels it Q1.\n", "    text: Labels it Q1.\n    colour: red\n"),
            "x.yaml:10:5: criteria[1].colour: unknown key",
        ),
        (BASE + "extra: 1\n", "x.yaml:11:1: extra: unknown key"),
        ("id: demo\ncriteria: []\n", "x.yaml:2:1: criteria: a rubric needs at least one criterion"),
        (
            BASE.replace(
                "    weight: 1.0\n  - id: temporal",
                "    weight: 1.0\n    grader: {type: regex, pattern: '(unclosed'}\n  - id: temporal",
            ),
            "x.yaml:8:27: criteria[0].grader.pattern: not a valid regular expression",
        ),
        (
            BASE.replace(
                "    weight: 1.0\n  - id: temporal",
                "    weight: 1.0\n    grader: {type: magic}\n  - id: temporal",
            ),
            "x.yaml:8:5: criteria[0].grader: unknown grader type",
        ),
        (BASE.replace("mapping: strict", "mapping: lenient"), "x.yaml:3:1: mapping: Input should be"),
        (
            BASE.replace("    text: Labels it Q1.\n", ""),
            "x.yaml:8:5: criteria[1].text: required field is missing",
        ),
        (BASE.replace("version: 1\n", "version: 1\nid: other\n"), "x.yaml:3:1: id: duplicate key"),
        (
            BASE.replace("weight: 1.0", "weight: .inf", 1),
            "x.yaml:7:5: criteria[0].weight: Input should be a finite number",
        ),
        ("id: [demo\n", "x.yaml:2:1: not valid YAML"),
        (  # a letter, but not an ASCII one: the message says which letters
            BASE.replace("id: temporal", "id: 評価"),
            "x.yaml:8:5: criteria[1].id: an id is ASCII letters (A-Z, a-z), digits",
        ),
        ("- a\n- b\n", "x.yaml:1:1: <root>: a rubric must be a mapping"),
        ("", "x.yaml: the rubric is empty"),
        (
            BASE.replace("mapping: strict", "aggregation: normalized").replace(
                "weight: 1.0", "weight: -1.0\n    kind: negative"
            ),
            "criteria: 'normalized' aggregation needs at least one positive criterion",
        ),
    ],
)
def test_errors_name_file_line_column_and_field(text, expected):
    with pytest.raises(RubricError) as exc:
        parse_rubric(text, source="x.yaml")
    assert str(exc.value).startswith(expected) or expected in str(exc.value), str(exc.value)


def test_load_rubric_missing_file(tmp_path):
    with pytest.raises(RubricError, match="no such rubric file"):
        load_rubric(tmp_path / "nope.yaml")


def test_error_names_the_real_path(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text(BASE.replace("weight: 1.0\n  - id: temporal", "weight: -2\n  - id: temporal"))
    with pytest.raises(RubricError) as exc:
        load_rubric(p)
    assert str(exc.value).startswith(f"{p}:7:5: criteria[0].weight:")


def test_inline_dict_and_hash_is_layout_independent():
    yaml_rubric = parse_rubric(BASE)
    flow = parse_rubric(
        "{id: demo, version: 1, mapping: strict, criteria: [{id: accuracy, text: Gives the figure., weight: 1},"
        " {id: temporal, weight: 1.0, text: Labels it Q1.}]}  # same content, other layout"
    )
    as_dict = parse_rubric(yaml_rubric.model_dump())
    assert yaml_rubric.content_hash == flow.content_hash == as_dict.content_hash
    changed = parse_rubric(BASE.replace("weight: 1.0", "weight: 2.0", 1))
    assert changed.content_hash != yaml_rubric.content_hash
    with pytest.raises(RubricError, match=r"<inline>: criteria\[0\]\.weight"):
        parse_rubric({"id": "d", "criteria": [{"id": "a", "text": "t", "weight": -1}]})


def test_alias_bomb_is_cheap():
    bomb = "a: &a [x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(20)
    )
    with pytest.raises(RubricError):
        parse_rubric(bomb)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_arbitrary_text_only_raises_rubric_error(text):
    with contextlib.suppress(RubricError):
        assert isinstance(parse_rubric(text), Rubric)


yaml_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=True), st.text(max_size=12)
)
yaml_values = st.recursive(
    yaml_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
criterion_like = st.fixed_dictionaries(
    {},
    optional={
        "id": st.one_of(st.text(max_size=8), st.integers()),
        "text": yaml_scalars,
        "weight": yaml_scalars,
        "kind": st.sampled_from(["positive", "negative", "neutral", 3]),
        "grader": st.one_of(
            yaml_values,
            st.fixed_dictionaries(
                {"type": st.sampled_from(["regex", "number", "contains", "llm", "x"])},
                optional={
                    "pattern": st.text(max_size=6),
                    "value": yaml_scalars,
                    "text": yaml_values,
                    "unit": st.text(max_size=4),
                },
            ),
        ),
        "extra": yaml_values,
    },
)


@settings(max_examples=300, deadline=None)
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "id": yaml_scalars,
            "mapping": st.sampled_from(["strict", "ternary", "binary", "x"]),
            "aggregation": st.sampled_from(["weighted_sum", "normalized", "x"]),
            "criteria": st.one_of(yaml_values, st.lists(criterion_like, max_size=4)),
            "other": yaml_values,
        },
    )
)
def test_arbitrary_structures_only_raise_rubric_error(data):
    try:
        assert isinstance(parse_rubric(data), Rubric)
    except RubricError as e:
        assert str(e).startswith("<inline>")
