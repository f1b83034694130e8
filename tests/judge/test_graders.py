"""Deterministic graders and ``score_deterministic`` (docs/reference-cases.md §3 offline: 2.5 and 0.5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrl.errors import JudgeError
from agentrl.judge import evidence_of, find_numbers, load_rubric, parse_rubric, score_deterministic
from tests.judge.conftest import GOOD_REPORT, GOSSIP_REPORT, make_trajectory

RUBRICS = Path(__file__).resolve().parents[2] / "rubrics"


def one(grader: dict, kind: str = "positive", mapping: str = "strict"):
    weight = 1.0 if kind == "positive" else -1.0
    return parse_rubric(
        {
            "id": "g",
            "mapping": mapping,
            "criteria": [{"id": "c", "text": "t", "weight": weight, "kind": kind, "grader": grader}],
        }
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$12.3 billion", [12.3e9]),
        ("12.3bn and 12.3 B", [12.3e9, 12.3e9]),
        ("12,300 million", [12.3e9]),
        ("5 trillion; 2.5m; 7k", [5e12, 2.5e6, 7e3]),
        ("Q1 2025", [2025.0]),
        ("3 bits, 4 minutes", [3.0, 4.0]),
        ("12.3 billions, 2 thousands, 3 ms", [12.3e9, 2e3, 3.0]),
        ("-1.5 and +2", [-1.5, 2.0]),
        ("no numbers here", []),
    ],
)
def test_find_numbers(text, expected):
    assert find_numbers(text) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("grader", "report", "total"),
    [
        ({"type": "regex", "pattern": r"\\cite\{[^}]+\}"}, r"as shown \cite{x}", 1.0),
        ({"type": "regex", "pattern": r"\\cite\{[^}]+\}"}, "as shown [1]", 0.0),
        ({"type": "regex", "pattern": "q1", "ignore_case": True}, "Q1 data", 1.0),
        ({"type": "regex", "pattern": "q1"}, "Q1 data", 0.0),
        ({"type": "contains", "text": "Google Cloud"}, "google cloud grew", 1.0),
        ({"type": "contains", "text": "Google Cloud", "case_sensitive": True}, "google cloud grew", 0.0),
        ({"type": "contains", "text": ["cloud", "q1"]}, "Cloud in Q1", 1.0),
        ({"type": "contains", "text": ["cloud", "q4"]}, "Cloud in Q1", 0.0),
        ({"type": "contains", "text": ["cloud", "q4"], "match": "any"}, "Cloud in Q1", 1.0),
        ({"type": "not_contains", "text": ["trillion", "rumour"]}, "12.3 billion", 1.0),
        ({"type": "not_contains", "text": ["trillion", "rumour"]}, "5 Trillion", 0.0),
        ({"type": "number", "value": 12.3, "unit": "billion"}, "revenue of $12.3B", 1.0),
        ({"type": "number", "value": 12.3, "unit": "billion"}, "revenue of $12,300 million", 1.0),
        ({"type": "number", "value": 12.3, "unit": "billion", "tolerance": 0.01}, "about $12.2 billion", 1.0),
        (
            {"type": "number", "value": 12.3, "unit": "billion", "tolerance": 0.001},
            "about $12.2 billion",
            0.0,
        ),
        ({"type": "number", "value": 12.3, "unit": "billion"}, "12.3 million", 0.0),
        ({"type": "number", "value": 12.3, "unit": "billion"}, "12.3", 0.0),
        ({"type": "number", "value": 50, "abs_tolerance": 1, "tolerance": 0}, "grew 49.5 percent", 1.0),
    ],
)
def test_positive_graders(grader, report, total):
    assert score_deterministic(one(grader), report).total == total


def test_negative_deterministic_criterion_subtracts_when_the_flaw_is_present():
    rubric = one({"type": "contains", "text": "trillion"}, kind="negative")
    flawed = score_deterministic(rubric, "$5 trillion")
    assert flawed.total == -1.0 and flawed.criteria[0].verdict == "Fully Satisfied"
    clean = score_deterministic(rubric, "$12.3 billion")
    assert clean.total == 0.0 and clean.criteria[0].verdict == "Not Satisfied"


def test_reference_3_offline_rubric_gives_exactly_2_5_and_0_5():
    rubric = load_rubric(RUBRICS / "alphabet-2025-q1-cloud-offline.yaml")
    # each report comes after opening the page it was written from (the Q1 release, the gossip page)
    good = score_deterministic(rubric, GOOD_REPORT, evidence=evidence_of(make_trajectory(GOOD_REPORT)))
    gossip = score_deterministic(rubric, GOSSIP_REPORT, evidence=evidence_of(make_trajectory(GOSSIP_REPORT)))
    assert good.total == 2.5 and good.status == "ok"
    assert gossip.total == 0.5
    assert [(c.id, c.verdict) for c in gossip.criteria] == [
        ("accuracy", "Not Satisfied"),
        ("temporal", "Not Satisfied"),
        ("citation", "Fully Satisfied"),
    ]
    assert good.rubric_hash == rubric.content_hash and good.criteria[0].grader == "figure"
    # the same reports with no research behind them earn nothing
    assert score_deterministic(rubric, GOOD_REPORT).total == 0.0


def test_score_deterministic_refuses_llm_criteria():
    with pytest.raises(JudgeError, match="accuracy, temporal"):
        score_deterministic(load_rubric(RUBRICS / "alphabet-2025-q1-cloud.yaml"), GOOD_REPORT)
