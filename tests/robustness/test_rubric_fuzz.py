"""Fuzzing the rubric loader: any text, bytes or mapping gives a valid ``Rubric`` or a
``RubricError`` naming the file and (for YAML text) the line; never another exception."""

from __future__ import annotations

import re

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrl.errors import RubricError
from agentrl.judge import Rubric, load_rubric, parse_rubric

FUZZ = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

VALID = """\
id: demo
version: 1
mapping: strict
aggregation: weighted_sum
criteria:
  - id: accuracy
    text: Gives the figure.
    weight: 1.0
    grader: {type: number, value: 12.3, unit: billion}
  - id: citation
    text: Cites sources.
    weight: 0.5
    grader: {type: regex, pattern: '\\\\cite\\{[^}]+\\}'}
  - id: rumor
    kind: negative
    text: States a rumour as fact.
    weight: -1.0
"""

# Fragments that stress the YAML reader, its constructors and the schema.
TOKENS = [
    ":",
    ": ",
    "- ",
    "-",
    "\n",
    "\n  ",
    "\t",
    "\x00",
    "\ufeff",
    "#",
    "'",
    '"',
    "{",
    "}",
    "[",
    "]",
    ",",
    "&a ",
    "*a",
    "*b",
    "!!int ",
    "!!float ",
    "!!bool ",
    "!!timestamp ",
    "!!binary ",
    "!!set ",
    "!!python/object ",
    "? ",
    "|",
    ">",
    "---\n",
    "...\n",
    "%YAML 1.1\n",
    "2020-02-31",
    "1e999",
    ".nan",
    "1" * 5000,
    "~",
    "null",
    "id: x\n",
    "weight: -1\n",
    "weight: .inf\n",
    "kind: negative\n",
    "grader: {type: regex, pattern: '('}\n",
    "grader: {type: number, value: x}\n",
    "grader: {type: llm, extra: 1}\n",
    "criteria: []\n",
    "criteria:\n",
    "mapping: fuzzy\n",
    "aggregation: normalized\n",
    "<<: *a\n",
    "é",
    "\U0001f600",
    "\r",
    "\x85",
    "\u2028",
]


# The only errors without a line: an empty file, and nesting too deep for the YAML reader.
_NO_LINE = ("the rubric is empty", "not valid YAML: nested too deeply")


def _check_error(e: RubricError, source: str, text: str | None) -> None:
    msg = str(e)
    assert msg.startswith(f"{source}:"), msg
    m = re.match(rf"^{re.escape(source)}:(\d+)(:\d+)?: ", msg)
    if text is None:  # a mapping (no lines) or a file we wrote (bytes)
        return
    assert m or msg.removeprefix(f"{source}: ").startswith(_NO_LINE), msg
    if m:
        assert 1 <= int(m.group(1)) <= len(text.splitlines()) + 1, msg  # a line of this file


def _parse(text: str, source: str = "fuzz.yaml") -> Rubric | None:
    try:
        return parse_rubric(text, source=source)
    except RubricError as e:
        _check_error(e, source, text)
        return None


def test_the_valid_base_is_valid():
    assert isinstance(_parse(VALID), Rubric)


@FUZZ
@given(st.text(max_size=300))
def test_arbitrary_text(text):
    got = _parse(text)
    assert got is None or isinstance(got, Rubric)


@st.composite
def mutated(draw) -> str:
    text = VALID
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        op = draw(st.sampled_from(["insert", "delete", "replace"]))
        piece = draw(st.sampled_from(TOKENS) | st.text(max_size=3))
        j = min(len(text), i + draw(st.integers(0, 12)))
        if op == "insert":
            text = text[:i] + piece + text[i:]
        elif op == "delete":
            text = text[:i] + text[j:]
        else:
            text = text[:i] + piece + text[j:]
    return text


@FUZZ
@given(mutated())
def test_mutated_rubrics_are_valid_or_name_the_line(text):
    got = _parse(text)
    if got is not None:  # what loads is a consistent rubric
        assert got.criteria and len({c.id for c in got.criteria}) == len(got.criteria)
        assert all((c.weight > 0) == (c.kind == "positive") for c in got.criteria)


@FUZZ
@given(st.binary(max_size=300), st.booleans())
def test_arbitrary_bytes_from_a_file(tmp_path_factory, data, after_valid):
    path = tmp_path_factory.mktemp("rubric") / "r.yaml"
    path.write_bytes((VALID.encode() + data) if after_valid else data)
    try:
        got = load_rubric(path)
    except RubricError as e:
        text = path.read_bytes().decode("utf-8", errors="replace")
        _check_error(e, str(path), text)
    else:
        assert isinstance(got, Rubric)


names = st.sampled_from(
    [
        "id",
        "version",
        "description",
        "mapping",
        "aggregation",
        "criteria",
        "text",
        "weight",
        "kind",
        "grader",
        "type",
        "pattern",
        "value",
        "unit",
        "tolerance",
        "match",
    ]
)
values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=8)
    | st.sampled_from(["demo", "strict", "normalized", "negative", "regex", "number", "llm", "("]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(names | st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=14,
)


@FUZZ
@given(st.dictionaries(names, values, max_size=6))
def test_arbitrary_mappings_inline_and_as_yaml(data):
    try:
        parse_rubric(data, source="tasks.jsonl:3 rubric")
    except RubricError as e:
        _check_error(e, "tasks.jsonl:3 rubric", None)
    _parse(yaml.safe_dump(data, allow_unicode=True))


@pytest.mark.parametrize(
    "snippet",
    [
        "version: 2020-02-31",
        "version: !!int abc",
        "version: !!bool maybe",
        "version: !!timestamp x",
        "version: !!float x",
        "version: !!float ''",
        "version: " + "1" * 5000,
    ],
)
def test_values_pyyaml_cannot_construct_are_rubric_errors_at_their_line(snippet):
    """Regression: PyYAML's safe constructors raised ValueError/KeyError/AttributeError out of the loader."""
    with pytest.raises(RubricError, match=r"^r\.yaml:2:10: not valid YAML: cannot read the value"):
        parse_rubric("id: demo\n" + snippet + "\ncriteria: []\n", source="r.yaml")


def test_forbidden_characters_and_bad_utf8_name_their_line(tmp_path):
    with pytest.raises(RubricError, match=r"^r\.yaml:2:8: not valid YAML: special characters"):
        parse_rubric("id: demo\ntext: a\x00b\n", source="r.yaml")
    path = tmp_path / "r.yaml"
    path.write_bytes(b"id: demo\ncriteria:\n  - text: \xff\n")
    with pytest.raises(RubricError, match=rf"^{re.escape(str(path))}:3: not UTF-8 text"):
        load_rubric(path)


def test_deep_nesting_is_a_rubric_error():
    with pytest.raises(RubricError, match=r"^r\.yaml"):
        parse_rubric("id: " + "[" * 1_200, source="r.yaml")
