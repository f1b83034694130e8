"""The audit judge: a second judge that re-scores episodes the training judge scored, how often the
two agree, and the divergence that signals judge hacking.

A policy trained on one judge's reward can learn what that judge pays for rather than what it
should pay for (a keyword, a format, a citation it never opened): the training reward then rises
while an independent judge's falls. ``Auditor`` scores copies of judged trajectories with another
rubric (``audit.rubric``, or each task's own rubric from its suite when the run trains on a
``judge.rubric`` override), another model (``audit.judge``), or only the deterministic and evidence
graders (``audit.graders: deterministic``); the training trajectories' rewards are never touched.

Agreement (``agreement``), per audited batch, over the episodes both judges scored: each judge's
mean normalised reward; each episode's pass/fail per judge (normalised reward ≥ ``pass_threshold``);
the flip rate (the share whose pass/fail differs, ``agentrl.judge.agreement.flip_rate`` over the
two ratings of each episode) and Cohen's kappa of the two (``cohen_kappa``).

Divergence (``divergence``): over the last ``window`` audited points (step, training mean, audit
mean), the least-squares slopes b_train and b_audit of each mean on the step; it *fires* when
b_train > 0, b_audit < 0 and the gap between the fitted lines widens by at least ``min_gap``
across the window: (b_train − b_audit) · (last step − first step) ≥ min_gap.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel

from agentrl.errors import ConfigError
from agentrl.eval.config import AuditConfig
from agentrl.judge import Rubric, load_rubric, make_judge, normalized_reward, parse_rubric
from agentrl.judge.agreement import cohen_kappa, flip_rate
from agentrl.judge.llm import run_sync
from agentrl.trajectory import RewardBreakdown, Trajectory

__all__ = [
    "Agreement",
    "Auditor",
    "Divergence",
    "agreement",
    "deterministic_part",
    "divergence",
    "ols_slope",
    "suite_rubric",
]


class Agreement(BaseModel):
    """How the training judge and the audit judge agree on one batch of episodes."""

    episodes: int
    train_mean: float
    audit_mean: float
    flip_rate: float | None
    kappa: float | None
    pass_threshold: float


def agreement(train: Sequence[float], audit: Sequence[float], pass_threshold: float) -> Agreement:
    """Agreement of two judges' normalised rewards of the same episodes (float [E] each, E ≥ 1)."""
    if len(train) != len(audit) or not train:
        raise ValueError("agreement needs the two judges' rewards of the same (at least one) episodes")
    ratings = [(t >= pass_threshold, a >= pass_threshold) for t, a in zip(train, audit, strict=True)]
    return Agreement(
        episodes=len(train),
        train_mean=float(np.mean(train)),
        audit_mean=float(np.mean(audit)),
        flip_rate=flip_rate(ratings),
        kappa=cohen_kappa(ratings),
        pass_threshold=pass_threshold,
    )


def ols_slope(x: Sequence[float], y: Sequence[float]) -> float:
    """The least-squares slope of y on x (float [n] each, n ≥ 2, x not all equal)."""
    xa, ya = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    dx = xa - xa.mean()
    return float((dx * (ya - ya.mean())).sum() / (dx * dx).sum())


class Divergence(BaseModel):
    """The divergence check over one window of audited points."""

    steps: list[int]
    train_slope: float
    audit_slope: float
    widened: float
    """(train_slope − audit_slope) · (last step − first step): how much the fitted gap grew."""
    fires: bool


def divergence(
    points: Sequence[tuple[int, float, float]], *, window: int, min_gap: float
) -> Divergence | None:
    """The check over the last ``window`` of ``points`` (step, training mean, audit mean), in step
    order; None while there are fewer than ``window`` points."""
    if len(points) < window:
        return None
    last = list(points)[-window:]
    steps = [p[0] for p in last]
    b_train = ols_slope(steps, [p[1] for p in last])
    b_audit = ols_slope(steps, [p[2] for p in last])
    widened = (b_train - b_audit) * (steps[-1] - steps[0])
    fires = b_train > 0 and b_audit < 0 and widened >= min_gap
    return Divergence(steps=steps, train_slope=b_train, audit_slope=b_audit, widened=widened, fires=fires)


def deterministic_part(rubric: Rubric) -> Rubric:
    """``rubric`` without its LLM criteria (and without requirements on them); ``ConfigError`` when
    nothing deterministic is left."""
    kept = [c for c in rubric.criteria if not c.is_llm]
    if not kept:
        raise ConfigError(f"eval.audit.graders: deterministic: rubric {rubric.id!r} has only LLM criteria")
    if len(kept) == len(rubric.criteria):
        return rubric
    ids = {c.id for c in kept}
    data = rubric.model_dump(mode="json")
    data["criteria"] = [
        {**c, "requires": [r for r in c.get("requires", []) if r in ids]}
        for c in data["criteria"]
        if c["id"] in ids
    ]
    return parse_rubric(data, source=f"rubric {rubric.id} (deterministic criteria)")


def suite_rubric(trajectory: Trajectory) -> Rubric:
    """The task's own rubric, from the suite the episode ran in (``info.suite``): what the task is
    scored by when no ``judge.rubric`` overrides it."""
    from agentrl.env.reward import rubric_for
    from agentrl.env.suite import load_suite

    name = trajectory.info.get("suite")
    if not name:
        raise ConfigError(f"audit: trajectory {trajectory.id!r} names no suite (info.suite)")
    suite = load_suite(str(name))
    return rubric_for(suite.rubric_data(suite.task(trajectory.task_id)), source=f"task {trajectory.task_id}")


@dataclass
class Audited:
    """One audited batch: the copies scored by the audit judge and the agreement over them."""

    trajectories: list[Trajectory]
    agreement: Agreement | None


class Auditor:
    """Scores copies of judged trajectories with the audit judge (see the module docstring) and keeps
    the audited points of each series (``"train"``: samples of training steps, ``"val"``:
    evaluations) for the divergence check."""

    def __init__(self, config: AuditConfig, *, task_rubric: Callable[[Trajectory], Rubric] = suite_rubric):
        self.config = config
        self.override = load_rubric(config.rubric) if config.rubric else None
        self.task_rubric = task_rubric
        self.judge = make_judge(config.judge, source="eval.audit.judge")
        self.points: dict[str, list[tuple[int, float, float]]] = {"train": [], "val": []}

    def rubric(self, t: Trajectory) -> Rubric:
        """The rubric the audit judge scores ``t`` with."""
        rubric = self.override or self.task_rubric(t)
        if self.config.graders == "deterministic":
            rubric = deterministic_part(rubric)
        if not rubric.is_deterministic and self.config.judge.model is None:
            llm = ", ".join(c.id for c in rubric.criteria if c.is_llm)
            raise ConfigError(
                f"eval.audit: rubric {rubric.id!r} has LLM criteria ({llm}): set eval.audit.judge.model, "
                "or graders: deterministic"
            )
        return rubric

    def audit(self, trajectories: Sequence[Trajectory]) -> Audited:
        """Score copies of the trajectories the training judge scored (judge errors and unjudged ones
        are left out); each copy keeps its training reward and records the audit's in
        ``info["audit_reward"]``."""
        scored = [t for t in trajectories if t.reward is not None and t.reward.total is not None]
        items = [(t, self.rubric(t)) for t in scored]
        rewards: list[RewardBreakdown] = run_sync(self.judge.score_many(items)) if items else []
        copies, train, audit = [], [], []
        for t, r in zip(scored, rewards, strict=True):
            copy = t.model_copy(update={"info": {**t.info, "audit_reward": r.model_dump(mode="json")}})
            copies.append(copy)
            if r.total is not None:  # an audit judge error leaves the episode out of the agreement
                train.append(normalized_reward(t))
                audit.append(normalized_reward(r))
        found = agreement(train, audit, self.config.pass_threshold) if train else None
        return Audited(copies, found)

    def add_point(self, series: str, step: int, found: Agreement) -> Divergence | None:
        """Record an audited point of ``series`` and check the window that ends with it."""
        pts = self.points[series]
        pts[:] = [p for p in pts if p[0] < step]  # a re-run step (resume) replaces its point
        pts.append((step, found.train_mean, found.audit_mean))
        return divergence(pts, window=self.config.window, min_gap=self.config.min_gap)

    def close(self) -> None:
        self.judge.close()
