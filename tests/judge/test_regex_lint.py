"""The static backtracking check behind ``agentrl rubric validate``'s warnings."""

from __future__ import annotations

import re
import time
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentrl.cli
from agentrl.judge import parse_rubric
from agentrl.judge.regex_lint import backtracking_risks, rubric_warnings

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("pattern", "risk"),
    [
        ("(a+)+$", "nested quantifier"),
        ("(a*)*", "nested quantifier"),
        (r"(\w+\s?)+$", "nested quantifier"),
        ("(.*a){20}", "nested quantifier"),
        ("(x+x+)+y", "nested quantifier"),
        ("(a|a)*", "ambiguous alternation"),
        ("(a|aa)+$", "ambiguous alternation"),
        ("(?i)(?:Ab|aB)+", "ambiguous alternation"),
    ],
)
def test_risky_patterns_are_flagged(pattern, risk):
    risks = backtracking_risks(pattern)
    assert len(risks) == 1 and risks[0].startswith(risk), risks


@pytest.mark.parametrize(
    "pattern",
    [
        r"\\cite\{[^}]+\}",
        r"\b(Q1|first[- ]quarter)\b",
        r"(?:\d{1,3},)+\d{3}",  # the repeat ends on ',' which it cannot take: unambiguous
        r"(?:a+b)+",
        r"(?:ab|cd)*",
        "(a|ab)*c",  # after re's prefix factoring: a(?:|b), no two ways to read a text
        "(?>a+)+",  # atomic: never backtracks into the group
        "(?:a++)+",  # possessive
        "(?:Ab|aB)+",  # different without ignore-case
        r"(?is)^(?=.*\b(?:Q1|first[- ]quarter)\s+(?:of\s+)?2025\b)(?=.*\bnot\s+yet\b)",
    ],
)
def test_safe_patterns_are_not_flagged(pattern):
    assert backtracking_risks(pattern) == []


def test_ignore_case_field_counts():
    assert backtracking_risks("(?:Ab|aB)+", ignore_case=True) != []


def test_shipped_and_sandbox_rubrics_have_no_warnings():
    from agentrl.env.suite import load_suite

    suite = load_suite("sandbox")
    rubrics = [parse_rubric(suite.rubric_data(t)) for t in suite.tasks]
    assert sum(c.grader.type == "regex" for r in rubrics for c in r.criteria) > 100
    assert [w for r in rubrics for w in rubric_warnings(r)] == []


def test_rubric_validate_warns_and_still_passes(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(agentrl.cli, "COMMANDS", ("rubric",))
    path = tmp_path / "cat.yaml"
    path.write_text(
        "id: cat\ncriteria:\n"
        "  - id: ok\n    text: t\n    weight: 1\n    grader: {type: regex, pattern: 'Q[1-4]'}\n"
        "  - id: bad\n    text: t\n    weight: 1\n    grader: {type: regex, pattern: '(a+)+$'}\n"
    )
    assert agentrl.cli.main(["rubric", "validate", str(path), str(ROOT / "rubrics")]) == 0
    out = capsys.readouterr().out
    lines = [x for x in out.splitlines() if x.startswith("warning:")]
    assert lines == [
        f"warning: {path}: criteria[1] (bad): pattern '(a+)+$' may backtrack catastrophically: "
        "nested quantifier: a repeated group holds a {1,} repeat"
    ]


@pytest.mark.parametrize("depth", [200, 1000])
def test_deep_nesting_is_an_answer_not_a_crash(depth):
    pattern = "(?:" * depth + "a+" + ")+" * depth
    assert backtracking_risks(pattern) in (
        ["nested quantifier: a repeated group holds a {1,} repeat"],
        ["nested too deeply to check"],
    )
    from agentrl.errors import RubricError

    crit = {"id": "a", "text": "t", "weight": 1, "grader": {"type": "regex", "pattern": pattern}}
    try:
        parse_rubric({"id": "x", "criteria": [crit]})
    except RubricError as e:  # too deep for Python's regex parser: a rubric error, not a crash
        assert "nested too deeply" in str(e)


@given(st.text(alphabet="ab()|*+?{}1,:\\w.^$[]-", max_size=30))
@settings(max_examples=300, deadline=None)
def test_any_compilable_pattern_gets_an_answer(pattern):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "possible nested set" and the like
            re.compile(pattern)
    except re.error:
        return
    risks = backtracking_risks(pattern)
    assert isinstance(risks, list) and all(isinstance(r, str) and r for r in risks)


def test_many_alternatives_are_checked_in_linear_time():
    # 330 alternatives that start on 330 different characters, under a repeat: no two overlap, so
    # every pair had to be compared (200 of them took 23 s); the last one repeats the first's start
    starts = [chr(0x100 + i) for i in range(330)]
    clean = "(?:" + "|".join(f"{c}x" for c in starts) + ")+"
    clash = "(?:" + "|".join(f"{c}x" for c in starts) + f"|{starts[0]}y)+"
    t0 = time.perf_counter()
    assert backtracking_risks(clean) == []
    assert backtracking_risks(clash) == [
        "ambiguous alternation: two alternatives under a repeat can match the same text"
    ]
    assert time.perf_counter() - t0 < 10


@pytest.mark.parametrize(
    "pattern",
    ["(?:a|b)+", "(?:ab|ac)+", r"(?:\d|x)*", r"(?:\d|5)+", "(?:[a-c]|[c-e])+", r"(?:\s|x|y| )+", "(?i)(?:A|b|a)+",
     "(?:x(?:p|q)|y|p)+", "(a|b)c(?:d|e|c)*", r"(?:\w+|-)+"],
)  # fmt: skip
def test_the_one_pass_overlap_is_the_pairwise_one(monkeypatch, pattern):
    import agentrl.judge.regex_lint as lint

    fast = backtracking_risks(pattern)

    def pairwise(sets):
        return any(lint._overlap(sets[x], sets[y]) for x in range(len(sets)) for y in range(x))

    monkeypatch.setattr(lint, "_any_two_overlap", pairwise)
    assert fast == backtracking_risks(pattern)
