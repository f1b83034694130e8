"""Re-score stored trajectories under a new rubric or judge, and compare with the stored scores.

Scoring goes through ``agentrl.judge.score_trajectories``, so the verdict cache makes a repeat run
free and every new verdict records the rubric hash that scored it. The comparison is per criterion:
the mean mapped score (0..1) before and after, its change, and how many trajectories changed verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from agentrl.jsonl import dumps
from agentrl.trajectory import CriterionScore, RewardBreakdown, Trajectory, training_reward

__all__ = [
    "CriterionDelta",
    "RescoreReport",
    "TrajectoryDelta",
    "compare_rewards",
    "format_deltas",
    "report_json",
    "rescore",
]


class CriterionDelta(BaseModel):
    """One criterion across the trajectories scored both times (``None``: absent on that side)."""

    id: str
    kind: str
    weight_old: float | None = None
    weight_new: float | None = None
    old_mean: float | None = None
    new_mean: float | None = None
    delta: float | None = None
    changed: int = 0
    """Trajectories whose verdict on this criterion differs (present on both sides)."""
    compared: int = 0
    """Trajectories that have this criterion in both the stored and the new reward."""


class TrajectoryDelta(BaseModel):
    """One trajectory's total before and after, with the rubric hash of each."""

    id: str
    old_total: float | None
    new_total: float | None
    delta: float | None
    old_rubric_hash: str | None
    new_rubric_hash: str | None
    new_status: str | None


class RescoreReport(BaseModel):
    """What re-scoring changed: per criterion, in total, per trajectory, and what the judge cost."""

    trajectories: int
    compared: int = 0
    """Trajectories with an ok reward both before and after (the totals compare these)."""
    old_mean: float | None = None
    new_mean: float | None = None
    delta: float | None = None
    changed_totals: int = 0
    judge_errors: int = 0
    rubric_hashes: list[str] = Field(default_factory=list)
    """The distinct rubric hashes of the new rewards."""
    first_error: str | None = None
    """The first judge error's message, if any."""
    calls: int = 0
    cache_hits: int = 0
    cost_usd: float = 0.0
    other_rubrics: dict[str, int] = Field(default_factory=dict)
    """Stored rubric id → how many of the compared trajectories it scored, for the ids that are not
    the new reward's: those deltas put two rubrics' questions side by side (a task's own rubric
    against one written for another task), not two judges' answers to one rubric."""
    criteria: list[CriterionDelta] = Field(default_factory=list)
    per_trajectory: list[TrajectoryDelta] = Field(default_factory=list)


def _ok(r: RewardBreakdown | None) -> bool:
    # the reward contract's "trainable"; the report compares the rubric totals
    return training_reward(r, normalize=False) is not None


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def compare_rewards(old: Sequence[Trajectory], new: Sequence[Trajectory]) -> RescoreReport:
    """Compare the stored rewards of ``old`` with those of ``new`` (the same trajectories, in order)."""
    rep = RescoreReport(trajectories=len(new))
    olds, news = [], []
    crit: dict[str, dict[str, Any]] = {}
    hashes: list[str] = []
    for a, b in zip(old, new, strict=True):
        ra, rb = a.reward, b.reward
        if rb is not None:
            rep.calls += rb.calls
            rep.cache_hits += rb.cache_hits
            rep.cost_usd += rb.cost_usd
            rep.judge_errors += rb.status == "judge_error"
            if rb.status == "judge_error" and rep.first_error is None:
                rep.first_error = rb.error
            if rb.rubric_hash and rb.rubric_hash not in hashes:
                hashes.append(rb.rubric_hash)
        both = _ok(ra) and _ok(rb)
        d = (rb.total - ra.total) if both else None  # type: ignore[union-attr,operator]
        rep.per_trajectory.append(
            TrajectoryDelta(
                id=b.id,
                old_total=ra.total if ra else None,
                new_total=rb.total if rb else None,
                delta=d,
                old_rubric_hash=ra.rubric_hash if ra else None,
                new_rubric_hash=rb.rubric_hash if rb else None,
                new_status=rb.status if rb else None,
            )
        )
        if not both:
            continue
        if ra.rubric_id and rb.rubric_id and ra.rubric_id != rb.rubric_id:  # type: ignore[union-attr]
            rep.other_rubrics[ra.rubric_id] = rep.other_rubrics.get(ra.rubric_id, 0) + 1  # type: ignore[union-attr]
        olds.append(ra.total)  # type: ignore[union-attr]
        news.append(rb.total)  # type: ignore[union-attr]
        rep.changed_totals += abs(d) > 1e-12  # type: ignore[arg-type]
        before: dict[str, CriterionScore] = {c.id: c for c in ra.criteria}  # type: ignore[union-attr]
        after: dict[str, CriterionScore] = {c.id: c for c in rb.criteria}  # type: ignore[union-attr]
        for cid in [*before, *(k for k in after if k not in before)]:
            c = crit.setdefault(cid, {"old": [], "new": [], "changed": 0, "compared": 0, "kind": None})
            x, y = before.get(cid), after.get(cid)
            if x is not None:
                c["old"].append(x.score)
                c["w_old"], c["kind"] = x.weight, x.kind
            if y is not None:
                c["new"].append(y.score)
                c["w_new"], c["kind"] = y.weight, y.kind
            if x is not None and y is not None:
                c["compared"] += 1
                c["changed"] += x.verdict != y.verdict
    rep.compared = len(olds)
    rep.old_mean, rep.new_mean = _mean(olds), _mean(news)
    if rep.old_mean is not None and rep.new_mean is not None:
        rep.delta = rep.new_mean - rep.old_mean
    rep.rubric_hashes = hashes
    for cid, c in crit.items():
        om, nm = _mean(c["old"]), _mean(c["new"])
        rep.criteria.append(
            CriterionDelta(
                id=cid,
                kind=c["kind"] or "positive",
                weight_old=c.get("w_old"),
                weight_new=c.get("w_new"),
                old_mean=om,
                new_mean=nm,
                delta=None if om is None or nm is None else nm - om,
                changed=c["changed"],
                compared=c["compared"],
            )
        )
    return rep


def rescore(
    trajs: Sequence[Trajectory], rubric: Any, config: Any, *, base_dir: str = "."
) -> tuple[list[Trajectory], RescoreReport]:
    """Score ``trajs`` again with ``rubric`` (a ``Rubric``; None = each one's ``info.rubric``) and the
    judge ``config`` (``JudgeConfig``). Returns the re-scored copies, each with the stored total and
    rubric hash kept in ``info["rescored_from"]``, and the comparison with the stored rewards."""
    from agentrl.judge import score_trajectories

    judged = score_trajectories(list(trajs), rubric, config, base_dir=base_dir)
    out = []
    for old, new in zip(trajs, judged, strict=True):
        info = dict(new.info)
        info["rescored_from"] = {
            "total": old.reward.total if old.reward else None,
            "status": old.reward.status if old.reward else None,
            "rubric_hash": old.reward.rubric_hash if old.reward else None,
        }
        out.append(new.model_copy(update={"info": info}))
    return out, compare_rewards(trajs, out)


def _num(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "–"
    return f"{x:+.4f}" if signed else f"{x:.4f}"


def format_deltas(rep: RescoreReport) -> str:
    """The comparison as a readable table: one line per criterion, then the total."""
    head = ["criterion", "kind", "weight", "stored", "new", "Δ", "verdicts changed"]
    rows = []
    for c in rep.criteria:
        if c.weight_old is None:
            weight, note = f"{c.weight_new:g} (added)", ""
        elif c.weight_new is None:
            weight, note = f"{c.weight_old:g} (removed)", ""
        else:
            same = c.weight_old == c.weight_new
            weight, note = (f"{c.weight_new:g}" if same else f"{c.weight_old:g}→{c.weight_new:g}"), ""
        changed = f"{c.changed}/{c.compared}" if c.compared else "–"
        rows.append(
            [c.id, c.kind, weight + note, _num(c.old_mean), _num(c.new_mean), _num(c.delta, True), changed]
        )
    rows.append(
        [
            "total",
            "",
            "",
            _num(rep.old_mean),
            _num(rep.new_mean),
            _num(rep.delta, True),
            f"{rep.changed_totals}/{rep.compared}",
        ]
    )
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    out = [
        f"re-scored {rep.trajectories} trajectories ({rep.compared} scored before and after; "
        f"judge errors {rep.judge_errors})",
        "stored/new = mean criterion score (0..1, before weights); total = mean reward",
        line(head),
        "  ".join("-" * w for w in widths),
        *[line(r) for r in rows[:-1]],
        "  ".join("-" * w for w in widths),
        line(rows[-1]),
        "rubric hash " + (", ".join(h[:16] for h in rep.rubric_hashes) or "–"),
        f"judge calls {rep.calls}, cache hits {rep.cache_hits}, cost ${rep.cost_usd:.4f}",
    ]
    if rep.other_rubrics:
        n = sum(rep.other_rubrics.values())
        named = ", ".join(f"{k} ({v})" for k, v in sorted(rep.other_rubrics.items()))
        out.append(
            f"note: {n} of {rep.compared} were scored under another rubric ({named}): "
            "their Δ compares two rubrics, not two judges of one"
        )
    if rep.first_error:
        out.append("first judge error: " + " ".join(rep.first_error.split())[:400])
    return "\n".join(out)


def report_json(rep: RescoreReport) -> str:
    """The comparison as one JSON object."""
    return dumps(rep.model_dump(), ensure_ascii=False)
