"""Verdict → score mappings and the aggregation of criterion scores into one reward.

The three mappings (``strict`` is Step-DeepResearch's asymmetric rule):

===================== ===================== ===================== ===================
verdict               strict (pos / neg)    ternary               binary
===================== ===================== ===================== ===================
Fully Satisfied       1 / 1                 1                     1
Partially Satisfied   0 / 1                 0.5                   1
Not Satisfied         0 / 0                 0                     0
===================== ===================== ===================== ===================

A negative criterion describes a flaw and carries a negative weight, so a score of 1 there
(the flaw is present) subtracts ``|w|``. Aggregations: ``weighted_sum`` R = Σ wᵢ·sᵢ and
``normalized`` R = clip(Σ wᵢ·sᵢ / Σ_{w>0} w, 0, 1) (HealthBench's rule). The normalised value of a
``weighted_sum`` rubric of flaws alone is 1 + R / |Σ_{w<0} w| (``normalize``), so it too is on [0, 1].

Every reward also carries its normalised value (``RewardBreakdown.normalized``), computed by
``normalize`` (which lives in ``agentrl.trajectory.reward``, beside the reward contract, and is
re-exported here); trainers, replays and adapters read it through ``training_reward``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from agentrl.trajectory import VERDICTS, CriterionScore, RewardBreakdown, normalize, normalized_reward

__all__ = [
    "AGGREGATIONS",
    "MAPPINGS",
    "aggregate",
    "apply_requires",
    "breakdown",
    "map_verdict",
    "normalize",
    "normalized_reward",
]

MAPPINGS: tuple[str, ...] = ("strict", "ternary", "binary")
AGGREGATIONS: tuple[str, ...] = ("weighted_sum", "normalized")


def map_verdict(verdict: str, kind: str, mapping: str) -> float:
    """The score in [0, 1] of one enumerated verdict for a ``positive`` or ``negative`` criterion.

    Raises ``ValueError`` for a verdict, kind or mapping outside the enumerations: a score never
    comes from free text.
    """
    if verdict not in VERDICTS:
        raise ValueError(f"unknown verdict {verdict!r}; expected one of {', '.join(VERDICTS)}")
    if kind not in ("positive", "negative"):
        raise ValueError(f"unknown criterion kind {kind!r}; expected positive or negative")
    full, partial = verdict == "Fully Satisfied", verdict == "Partially Satisfied"
    if mapping == "strict":
        return 1.0 if (full or (partial and kind == "negative")) else 0.0
    if mapping == "ternary":
        return 1.0 if full else 0.5 if partial else 0.0
    if mapping == "binary":
        return 1.0 if (full or partial) else 0.0
    raise ValueError(f"unknown mapping {mapping!r}; expected one of {', '.join(MAPPINGS)}")


def aggregate(
    scores: Iterable[CriterionScore | tuple[float, float]],
    aggregation: str,
    *,
    positive_weight: float | None = None,
) -> float:
    """Combine (weight, score) pairs into the reward.

    ``scores`` holds ``CriterionScore`` objects or ``(weight, score)`` tuples. For ``normalized``
    the denominator is ``positive_weight`` when given (Σ of the rubric's positive weights, so a
    criterion that could not be graded still counts), else the Σ of the positive weights present.
    """
    pairs = [
        (s.weight, s.score) if isinstance(s, CriterionScore) else (float(s[0]), float(s[1])) for s in scores
    ]
    total = sum(w * s for w, s in pairs)
    if aggregation == "weighted_sum":
        return total
    if aggregation == "normalized":
        denom = positive_weight if positive_weight is not None else sum(w for w, _ in pairs if w > 0)
        if denom <= 0:
            raise ValueError("'normalized' aggregation needs a positive total weight")
        return _clip_ratio(total, denom)
    raise ValueError(f"unknown aggregation {aggregation!r}; expected one of {', '.join(AGGREGATIONS)}")


def _clip_ratio(total: float, positive_weight: float) -> float:
    return min(1.0, max(0.0, total / positive_weight))


def apply_requires(rubric, criteria: Sequence[CriterionScore]) -> list[CriterionScore]:
    """The graded criteria with each criterion's ``requires`` applied, in the given order.

    A criterion counts only when every criterion it requires holds (is Fully Satisfied, after its
    own requirements): otherwise its verdict becomes Not Satisfied, score 0, and its reasoning says
    which requirement failed and what it was graded before. Requirements are acyclic (the rubric
    checks), so resolving them in dependency order terminates; a requirement left ungraded holds not.
    """
    by_id = {c.id: c for c in criteria}
    needs = {c.id: list(getattr(c, "requires", []) or []) for c in rubric.criteria}
    done: dict[str, CriterionScore] = {}

    def resolve(cid: str) -> CriterionScore | None:
        if cid in done or cid not in by_id:
            return done.get(cid)
        c = by_id[cid]
        failed = [
            r for r in needs.get(cid, []) if (g := resolve(r)) is None or g.verdict != "Fully Satisfied"
        ]
        if failed and (c.score != 0 or c.verdict != "Not Satisfied"):
            was = f"graded {c.verdict}" + (f": {c.reasoning}" if c.reasoning else "")
            c = c.model_copy(
                update={
                    "verdict": "Not Satisfied",
                    "score": 0.0,
                    "reasoning": f"requires {', '.join(failed)}, which does not hold ({was})",
                }
            )
        done[cid] = c
        return c

    return [resolve(c.id) or c for c in criteria]


def breakdown(
    rubric,
    criteria: Sequence[CriterionScore],
    *,
    judge_model: str | None = None,
    error: str | None = None,
    calls: int = 0,
    cache_hits: int = 0,
    prompt_tokens: int = 0,
    completion_tokens: int = 0,
    cost_usd: float = 0.0,
) -> RewardBreakdown:
    """The ``RewardBreakdown`` of a rubric from its graded criteria, in rubric order.

    Each criterion's ``requires`` is applied here (``apply_requires``), the one place every path
    goes through. When ``error`` is given, or a criterion of the rubric has no score, the status is
    ``judge_error`` and the total is null: a failed judge never becomes a 0 or a 1.
    """
    by_id = {c.id: c for c in apply_requires(rubric, criteria)}
    ordered = [by_id[c.id] for c in rubric.criteria if c.id in by_id]
    missing = [c.id for c in rubric.criteria if c.id not in by_id]
    if missing and error is None:
        error = f"no verdict for criteria {', '.join(missing)}"
    total = normalized = None
    if error is None:
        positive = sum(c.weight for c in rubric.criteria if c.weight > 0)
        negative = sum(c.weight for c in rubric.criteria if c.weight < 0)
        total = aggregate(ordered, rubric.aggregation, positive_weight=positive)
        normalized = normalize(total, rubric.aggregation, positive, negative)
    return RewardBreakdown(
        total=total,
        status="ok" if error is None else "judge_error",
        normalized=normalized,
        criteria=ordered,
        rubric_id=rubric.id,
        rubric_hash=rubric.content_hash,
        judge_model=judge_model,
        mapping=rubric.mapping,
        aggregation=rubric.aggregation,
        error=error,
        calls=calls,
        cache_hits=cache_hits,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cost_usd=cost_usd,
    )
