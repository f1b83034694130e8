"""Judged trajectories built in memory for the evaluation tests."""

from __future__ import annotations

from typing import Any

from agentrl.trajectory import CriterionScore, Message, RewardBreakdown, Trajectory


def traj(
    task: str,
    sample: int,
    reward: float | None,
    *,
    criteria: dict[str, float] | None = None,
    status: str = "answered",
    judge_error: bool = False,
    **info: Any,
) -> Trajectory:
    """Trajectory ``task#sample`` with normalised reward ``reward`` (None: unjudged), its criteria
    as ``{id: score}`` (an id starting with ``neg-`` is a negative criterion), and ``info``."""
    if judge_error:
        rb: RewardBreakdown | None = RewardBreakdown(total=None, status="judge_error", error="boom")
    elif reward is None:
        rb = None
    else:
        crits = [
            CriterionScore(
                id=c,
                score=s,
                weight=-1.0 if c.startswith("neg-") else 1.0,
                kind="negative" if c.startswith("neg-") else "positive",
                grader="regex",
            )
            for c, s in (criteria or {}).items()
        ]
        rb = RewardBreakdown(total=reward, normalized=reward, criteria=crits)
    return Trajectory(
        id=f"{task}#{sample}",
        task_id=task,
        messages=[Message(role="user", content="q")],
        reward=rb,
        info={"sample": sample, "seed": 1000 + sample, "status": status, **info},
    )
