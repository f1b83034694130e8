"""Rubric numbers that validate are numbers that make sense.

- Weights are finite and within ``[MIN_WEIGHT, MAX_WEIGHT]`` in absolute value: two criteria of
  ``weight: 1e308`` validated (``max inf``) and a perfect report scored total ``inf``, normalised 0.
- ``true``/``false`` are not numbers (``weight: true`` was read as 1), in weights, versions and
  grader settings.
- A ``weighted_sum`` rubric of flaws alone normalises to the share of its flaw weight the report
  avoided (it scored −1.0). For every rubric that validates and every set of verdicts, the total is
  finite and the normalised score is in [0, 1] (a property test over random rubrics, weights at the
  bounds included).
- ``agentrl rubric validate`` warns about a negative criterion graded ``not_contains`` (a double
  negative that fires on every clean report), naming the criterion, and still exits 0.
"""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.errors import RubricError
from agentrl.judge import parse_rubric
from agentrl.judge.rubric import MAX_WEIGHT, MIN_WEIGHT
from agentrl.judge.score import breakdown
from agentrl.trajectory import VERDICTS, CriterionScore


def _yaml(*criteria: str, head: str = "id: r\n") -> str:
    return head + "criteria:\n" + "".join(f"  - {c}\n" for c in criteria)


def _crit(cid: str, weight: str, kind: str = "positive", grader: str = "{type: contains, text: x}") -> str:
    return f"{{id: {cid}, text: t, kind: {kind}, weight: {weight}, grader: {grader}}}"


@pytest.mark.parametrize("weight", ["1e308", "-1e308", "1e7", "1e-9", ".inf", ".nan"])
def test_absurd_weights_are_refused_at_their_line(weight):
    kind = "negative" if weight.startswith("-") else "positive"
    text = _yaml(_crit("a", "1"), _crit("b", weight, kind))
    with pytest.raises(RubricError, match=r"^r\.yaml:4:\d+: criteria\[1\]\.weight: "):
        parse_rubric(text, "r.yaml")


def test_two_huge_weights_no_longer_make_an_infinite_total():
    """The issue's case: ``max inf`` and a perfect report's total ``inf``, normalised 0."""
    with pytest.raises(RubricError, match=r"\|weight\| must be between 1e-06 and 1e\+06, got 1e\+308"):
        parse_rubric(_yaml(_crit("a", "1e308"), _crit("b", "1e308")), "r.yaml")
    at_bound = parse_rubric(_yaml(_crit("a", str(MAX_WEIGHT)), _crit("b", str(MAX_WEIGHT))), "r.yaml")
    perfect = [_score(c, "Fully Satisfied") for c in at_bound.criteria]
    r = breakdown(at_bound, perfect)
    assert r.total == 2 * MAX_WEIGHT and r.normalized == 1.0


@pytest.mark.parametrize(
    ("field", "text"),
    [
        ("criteria[0].weight", _yaml(_crit("a", "true"))),
        ("criteria[0].weight", _yaml(_crit("a", "false"))),
        ("version", _yaml(_crit("a", "1"), head="id: r\nversion: true\n")),
        (
            "criteria[0].grader.tolerance",
            _yaml(_crit("a", "1", grader="{type: number, value: 3, tolerance: true}")),
        ),
        ("criteria[0].grader.value", _yaml(_crit("a", "1", grader="{type: figure, value: yes}"))),
    ],
)
def test_booleans_are_not_numbers(field, text):
    with pytest.raises(
        RubricError,
        match=re.escape(field) + ": expected a number, got a boolean",
    ):
        parse_rubric(text, "r.yaml")


def test_flaws_alone_normalise_to_the_share_of_flaw_weight_avoided():
    """Before: −1.0 for a report with the flaw (the docs promise [0, 1])."""
    text = _yaml(
        _crit("a", "-1", "negative"), _crit("b", "-2", "negative"), head="id: r\naggregation: weighted_sum\n"
    )
    rubric = parse_rubric(text, "r.yaml")
    for verdicts, total, normalized in (
        (("Not Satisfied", "Not Satisfied"), 0.0, 1.0),
        (("Fully Satisfied", "Not Satisfied"), -1.0, 2 / 3),
        (("Fully Satisfied", "Fully Satisfied"), -3.0, 0.0),
    ):
        r = breakdown(rubric, [_score(c, v) for c, v in zip(rubric.criteria, verdicts, strict=True)])
        assert r.total == total and r.normalized == pytest.approx(normalized), (verdicts, r)
    with pytest.raises(
        RubricError, match=r"^r\.yaml:3:1: criteria: 'normalized' aggregation needs at least one positive"
    ):
        parse_rubric(text.replace("weighted_sum", "normalized"), "r.yaml")


def _score(c, verdict: str) -> CriterionScore:
    from agentrl.judge.score import map_verdict

    return CriterionScore(
        id=c.id, kind=c.kind, weight=c.weight, verdict=verdict, score=map_verdict(verdict, c.kind, "ternary")
    )


_weights = st.one_of(
    st.floats(-2 * MAX_WEIGHT, 2 * MAX_WEIGHT),
    st.sampled_from([MAX_WEIGHT, -MAX_WEIGHT, MIN_WEIGHT, -MIN_WEIGHT, 1e308, -1e308, 1e-300, 0.0]),
    st.sampled_from([math.inf, -math.inf, math.nan]),
)


@settings(max_examples=300, deadline=None)
@given(
    weights=st.lists(_weights, min_size=1, max_size=8),
    aggregation=st.sampled_from(["weighted_sum", "normalized"]),
    verdicts=st.lists(st.sampled_from(VERDICTS), min_size=8, max_size=8),
)
def test_any_rubric_that_validates_scores_finite_and_normalises_into_0_1(weights, aggregation, verdicts):
    criteria = [
        {
            "id": f"c{i}",
            "text": "t",
            "weight": w,
            "kind": "negative" if w < 0 else "positive",
            "grader": {"type": "llm"},
        }
        for i, w in enumerate(weights)
    ]
    try:
        rubric = parse_rubric(
            {"id": "r", "aggregation": aggregation, "mapping": "ternary", "criteria": criteria}
        )
    except RubricError:
        return
    r = breakdown(rubric, [_score(c, v) for c, v in zip(rubric.criteria, verdicts, strict=False)])
    assert r.status == "ok" and math.isfinite(r.total), r
    assert 0.0 <= r.normalized <= 1.0, r
    assert math.isfinite(rubric.max_score) and math.isfinite(rubric.min_score)


def test_validate_warns_about_a_double_negative_and_still_passes(capsys, tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(
        _yaml(
            _crit("accuracy", "1", grader="{type: contains, text: '$12.3 billion'}"),
            _crit("rumor", "-1", "negative", "{type: not_contains, text: rumour}"),
            _crit("gossip", "-1", "negative", "{type: contains, text: gossip}"),
        )
    )
    capsys.readouterr()
    from agentrl.cli import main

    assert main(["rubric", "validate", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    warnings = [line for line in out if line.startswith("warning:")]
    assert len(warnings) == 1, out
    assert (
        "criteria[1] (rumor)" in warnings[0]
        and "not_contains" in warnings[0]
        and "double negative" in warnings[0]
    )


def test_the_shipped_rubrics_still_validate_without_warnings(capsys):
    from pathlib import Path

    from agentrl.cli import main

    capsys.readouterr()
    assert main(["rubric", "validate", str(Path(__file__).resolve().parents[2] / "rubrics")]) == 0
    out = capsys.readouterr().out
    assert "ok: " in out and "warning" not in out, out
