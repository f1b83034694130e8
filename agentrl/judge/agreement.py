"""Judge agreement: how repeatable the judge's verdicts are, and how well they match human labels.

Each trajectory is judged ``n`` times with the verdict cache bypassed (one call per sample, the
configured temperature). Per criterion it reports, under each verdict→score mapping, the **flip
rate**: the chance that two samples of the same trajectory get different scores (for a criterion
with samples v₁…vₙ on a trajectory: the share of its n(n−1)/2 pairs that differ, averaged over
trajectories). ``ternary`` tells all three verdicts apart, so its flip rate is that of the raw
verdicts; ``strict`` and ``binary`` each merge ``Partially Satisfied`` into a side, and the one
with the lower flip rate over the LLM criteria is the mapping that would have been most stable.

Given labelled verdicts, every sample is compared with its label: accuracy (share equal) and
Cohen's kappa κ = (p_o − p_e) / (1 − p_e), with p_o the observed agreement and p_e the agreement
expected from the judge's and the labels' marginal frequencies, under each mapping.

Labels file (JSONL, one labelled verdict a line; ``#`` lines and blank lines are skipped)::

    {"trajectory_id": "t1", "criterion_id": "accuracy", "verdict": "Fully Satisfied"}
"""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from fractions import Fraction
from itertools import combinations
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from agentrl.errors import ConfigError
from agentrl.judge.config import JudgeConfig
from agentrl.judge.llm import make_judge, run_sync
from agentrl.judge.record import resolve_rubric
from agentrl.judge.rubric import Rubric
from agentrl.judge.score import MAPPINGS, map_verdict
from agentrl.trajectory import RewardBreakdown, Trajectory, Verdict, report_of

__all__ = [
    "AgreementReport",
    "CriterionAgreement",
    "Label",
    "MappingAgreement",
    "agreement_report",
    "cohen_kappa",
    "flip_rate",
    "measure_agreement",
    "read_labels",
]


class Label(BaseModel):
    """One labelled verdict: what a person decided for one criterion of one trajectory."""

    model_config = ConfigDict(extra="forbid")

    trajectory_id: str
    criterion_id: str
    verdict: Verdict


def read_labels(path: str | os.PathLike[str]) -> dict[tuple[str, str], str]:
    """``{(trajectory_id, criterion_id): verdict}`` from a labels JSONL file.

    Raises ``ConfigError`` naming ``path:line`` for a line that is not a label, and for a second
    label of the same (trajectory, criterion).
    """
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise ConfigError(f"{p}: cannot read the labels: {e.strerror or e}") from None
    out: dict[tuple[str, str], str] = {}
    for n, line in enumerate(lines, start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            label = Label.model_validate(json.loads(line))
        except json.JSONDecodeError as e:
            raise ConfigError(f"{p}:{n}: not JSON: {e.msg}") from None
        except ValidationError as e:
            err = e.errors(include_url=False)[0]
            field = ".".join(str(x) for x in err["loc"]) or "<line>"
            raise ConfigError(f"{p}:{n}: {field}: {err['msg']}") from None
        key = (label.trajectory_id, label.criterion_id)
        if key in out:
            raise ConfigError(f"{p}:{n}: a second label for trajectory {key[0]!r}, criterion {key[1]!r}")
        out[key] = label.verdict
    return out


def cohen_kappa(pairs: Iterable[tuple[Hashable, Hashable]]) -> float | None:
    """Cohen's kappa of two raters over ``(rating_a, rating_b)`` pairs: (p_o − p_e) / (1 − p_e).

    None when it is undefined: no pairs, or p_e = 1 (both raters used one and the same category
    throughout, so agreement beyond chance cannot be measured).
    """
    pairs = list(pairs)
    if not pairs:
        return None
    n = len(pairs)
    # exact rationals, rounded once: κ stays in [−1, 1] (and is exactly 1 for full agreement)
    p_o = Fraction(sum(a == b for a, b in pairs), n)
    ca, cb = Counter(a for a, _ in pairs), Counter(b for _, b in pairs)
    p_e = Fraction(sum(ca[k] * cb[k] for k in ca), n * n)
    if p_e >= 1:
        return None
    return float((p_o - p_e) / (1 - p_e))


def flip_rate(groups: Iterable[Sequence[Hashable]]) -> float | None:
    """The chance that two samples of the same item differ: per item with ≥ 2 samples, the share
    of its sample pairs that differ, averaged over those items; None when there is none."""
    rates = []
    for g in groups:
        if len(g) >= 2:
            pairs = list(combinations(g, 2))
            rates.append(sum(a != b for a, b in pairs) / len(pairs))
    return sum(rates) / len(rates) if rates else None


class MappingAgreement(BaseModel):
    """One criterion under one mapping: flip rate, and accuracy and kappa against the labels."""

    flip_rate: float | None
    accuracy: float | None = None
    kappa: float | None = None


class CriterionAgreement(BaseModel):
    """How repeatable one criterion's verdicts were, and how they compare with the labels."""

    id: str
    kind: str
    grader: str
    trajectories: int
    """Trajectories with at least one verdict for this criterion."""
    verdicts: int
    """Verdicts sampled in all (a judge error can leave a sample without one)."""
    unstable: int
    """Trajectories whose samples did not all give the same verdict."""
    labelled: int = 0
    """Samples compared with a label."""
    mappings: dict[str, MappingAgreement]


class AgreementReport(BaseModel):
    """What ``agentrl judge agreement`` prints (``--json`` prints this model)."""

    trajectories: int
    samples: int
    judge_errors: int
    """Judge runs that ended as ``judge_error`` (their verdicts that did come back are used)."""
    unanswered: int
    """Trajectories without a report: nothing to judge."""
    labels: int = 0
    labels_unmatched: int = 0
    """Labels whose trajectory and criterion got no verdict in this run."""
    criteria: list[CriterionAgreement]
    flip_rate: dict[str, float | None]
    """Per mapping, the flip rate over the LLM criteria (all criteria when none is an LLM's)."""
    most_stable: list[str]
    """The mapping(s) with the lowest ``flip_rate`` (several on a tie; empty when nothing flipped
    or could flip: fewer than two samples)."""


def agreement_report(
    runs: Mapping[str, Sequence[RewardBreakdown]],
    labels: Mapping[tuple[str, str], str] | None = None,
    *,
    samples: int,
    unanswered: int = 0,
) -> AgreementReport:
    """Agreement statistics from ``runs`` (trajectory id → its ``samples`` rewards) and labels.

    ``unanswered`` counts trajectories left out of ``runs`` for having no report.
    """
    labels = labels or {}
    order: list[str] = []
    meta: dict[str, tuple[str, str]] = {}
    # criterion id → trajectory id → [(verdict, kind)]
    got: dict[str, dict[str, list[tuple[str, str]]]] = defaultdict(lambda: defaultdict(list))
    errors = 0
    for tid, rewards in runs.items():
        for r in rewards:
            errors += r.status == "judge_error"
            for c in r.criteria:
                if c.verdict is None:
                    continue
                if c.id not in meta:
                    order.append(c.id)
                    meta[c.id] = (c.kind, c.grader)
                got[c.id][tid].append((c.verdict, c.kind))
    criteria = []
    for cid in order:
        per_traj = got[cid]
        mappings = {}
        for m in MAPPINGS:
            groups = [[map_verdict(v, k, m) for v, k in vs] for vs in per_traj.values()]
            pairs = [
                (map_verdict(v, k, m), map_verdict(labels[(tid, cid)], k, m))
                for tid, vs in per_traj.items()
                if (tid, cid) in labels
                for v, k in vs
            ]
            mappings[m] = MappingAgreement(
                flip_rate=flip_rate(groups),
                accuracy=sum(a == b for a, b in pairs) / len(pairs) if pairs else None,
                kappa=cohen_kappa(pairs),
            )
        criteria.append(
            CriterionAgreement(
                id=cid,
                kind=meta[cid][0],
                grader=meta[cid][1],
                trajectories=len(per_traj),
                verdicts=sum(len(vs) for vs in per_traj.values()),
                unstable=sum(len({v for v, _ in vs}) > 1 for vs in per_traj.values()),
                labelled=sum(len(vs) for tid, vs in per_traj.items() if (tid, cid) in labels),
                mappings=mappings,
            )
        )
    pooled = [c for c in criteria if c.grader == "llm"] or criteria
    overall: dict[str, float | None] = {}
    for m in MAPPINGS:
        # Pooled over (trajectory, criterion) items, so every item weighs the same.
        overall[m] = flip_rate(
            [map_verdict(v, k, m) for v, k in got[c.id][tid]] for c in pooled for tid in got[c.id]
        )
    rated = {m: r for m, r in overall.items() if r is not None}
    best = min(rated.values(), default=None)
    most_stable = (
        [] if best is None or len(set(rated.values())) == 1 else [m for m in rated if rated[m] == best]
    )
    matched = sum(1 for tid, cid in labels if cid in got and tid in got[cid])
    return AgreementReport(
        trajectories=len(runs) + unanswered,
        samples=samples,
        judge_errors=errors,
        unanswered=unanswered,
        labels=len(labels),
        labels_unmatched=len(labels) - matched,
        criteria=criteria,
        flip_rate=overall,
        most_stable=most_stable,
    )


async def _sample(judge, items: Sequence[tuple[Trajectory, Rubric]], n: int) -> list[RewardBreakdown]:
    return await judge.score_many([item for item in items for _ in range(n)], dedup=False)


def measure_agreement(
    trajectories: Sequence[Trajectory],
    rubric: Rubric | None,
    config: JudgeConfig,
    *,
    samples: int,
    labels: Mapping[tuple[str, str], str] | None = None,
    base_dir: str | Path = ".",
) -> AgreementReport:
    """Judge each trajectory ``samples`` times (verdict cache off, one call per sample, the
    configured temperature) and compute the ``AgreementReport``.

    ``rubric`` overrides each trajectory's recorded rubric (``resolve_rubric``). Trajectory ids
    must be unique, since labels name them.
    """
    if samples < 2:
        raise ConfigError("--samples: needs at least 2 samples per trajectory to see a flip")
    seen: set[str] = set()
    for t in trajectories:
        if t.id in seen:
            raise ConfigError(f"trajectory id {t.id!r} appears twice; agreement needs unique ids")
        seen.add(t.id)
    answered = [t for t in trajectories if report_of(t) is not None]
    items = [(t, resolve_rubric(t, rubric, base_dir=base_dir)) for t in answered]
    cfg = config.model_copy(update={"cache_path": None, "samples": 1})
    with make_judge(cfg) as judge:
        rewards = run_sync(_sample(judge, items, samples))
    runs = {t.id: rewards[i * samples : (i + 1) * samples] for i, (t, _) in enumerate(items)}
    return agreement_report(runs, labels, samples=samples, unanswered=len(trajectories) - len(answered))
