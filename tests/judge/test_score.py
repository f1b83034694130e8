"""Verdict mappings and aggregation, against hand-computed values and a slow reference."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentrl.judge import aggregate, map_verdict, parse_rubric
from agentrl.judge.score import breakdown
from agentrl.trajectory import VERDICTS, CriterionScore

F, P, N = VERDICTS

TABLE = {
    # (verdict, kind, mapping): score
    (F, "positive", "strict"): 1.0,
    (P, "positive", "strict"): 0.0,
    (N, "positive", "strict"): 0.0,
    (F, "negative", "strict"): 1.0,
    (P, "negative", "strict"): 1.0,
    (N, "negative", "strict"): 0.0,
    (F, "positive", "ternary"): 1.0,
    (P, "positive", "ternary"): 0.5,
    (N, "positive", "ternary"): 0.0,
    (F, "negative", "ternary"): 1.0,
    (P, "negative", "ternary"): 0.5,
    (N, "negative", "ternary"): 0.0,
    (F, "positive", "binary"): 1.0,
    (P, "positive", "binary"): 1.0,
    (N, "positive", "binary"): 0.0,
    (F, "negative", "binary"): 1.0,
    (P, "negative", "binary"): 1.0,
    (N, "negative", "binary"): 0.0,
}


@pytest.mark.parametrize(("key", "expected"), TABLE.items())
def test_map_verdict_table(key, expected):
    assert map_verdict(*key) == expected


@pytest.mark.parametrize(
    "args", [("fully satisfied", "positive", "strict"), (F, "neutral", "strict"), (F, "positive", "lenient")]
)
def test_map_verdict_rejects_unknown(args):
    with pytest.raises(ValueError):
        map_verdict(*args)


def test_reference_3_weighted_sum():
    # docs/reference-cases.md §3: accuracy 1.0, temporal 1.0, \cite{} 0.5, strict mapping, weighted sum.
    good = [(1.0, map_verdict(F, "positive", "strict"))] * 2 + [(0.5, 1.0)]
    gossip = [
        (1.0, map_verdict(N, "positive", "strict")),
        (1.0, map_verdict(P, "positive", "strict")),
        (0.5, 1.0),
    ]
    assert aggregate(good, "weighted_sum") == 2.5
    assert aggregate(gossip, "weighted_sum") == 0.5


def test_normalized_clips_and_uses_positive_weights():
    # HealthBench rule: Σ w·s / Σ w⁺, clipped to [0, 1].
    assert aggregate([(2.0, 1.0), (2.0, 0.0), (-1.0, 0.0)], "normalized") == 0.5
    assert aggregate([(2.0, 0.0), (-1.0, 1.0)], "normalized") == 0.0
    assert aggregate([(1.0, 1.0), (1.0, 1.0)], "normalized") == 1.0
    assert aggregate([(1.0, 1.0)], "normalized", positive_weight=4.0) == 0.25
    with pytest.raises(ValueError):
        aggregate([(-1.0, 1.0)], "normalized")
    with pytest.raises(ValueError):
        aggregate([(1.0, 1.0)], "mean")


def _slow_reference(pairs, aggregation):
    total = 0.0
    for w, s in pairs:
        total = total + w * s
    if aggregation == "weighted_sum":
        return total
    pos = 0.0
    for w, _ in pairs:
        if w > 0:
            pos += w
    r = total / pos
    return 0.0 if r < 0 else 1.0 if r > 1 else r


weights = st.floats(min_value=-5, max_value=5, allow_nan=False).filter(lambda w: w != 0)
scores = st.sampled_from([0.0, 0.5, 1.0])


@given(
    st.lists(st.tuples(weights, scores), min_size=1, max_size=12),
    st.sampled_from(["weighted_sum", "normalized"]),
)
def test_aggregate_matches_slow_reference(pairs, aggregation):
    if aggregation == "normalized" and not any(w > 0 for w, _ in pairs):
        return
    assert aggregate(pairs, aggregation) == pytest.approx(_slow_reference(pairs, aggregation), abs=1e-12)


def test_breakdown_marks_missing_criteria_as_judge_error():
    rubric = parse_rubric(
        {
            "id": "r",
            "criteria": [{"id": "a", "text": "x", "weight": 1}, {"id": "b", "text": "y", "weight": 1}],
        }
    )
    ok = breakdown(
        rubric,
        [
            CriterionScore(id="b", verdict=F, score=1, weight=1),
            CriterionScore(id="a", verdict=N, score=0, weight=1),
        ],
    )
    assert ok.status == "ok" and ok.total == 1.0 and [c.id for c in ok.criteria] == ["a", "b"]
    assert ok.rubric_hash == rubric.content_hash
    bad = breakdown(rubric, [CriterionScore(id="a", verdict=F, score=1, weight=1)])
    assert bad.status == "judge_error" and bad.total is None and "b" in (bad.error or "")
