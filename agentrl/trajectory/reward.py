"""The reward contract: whether a trajectory is trained on, and on which number.

One function, ``training_reward``, decides it for every path that trains or places a reward (the
native trainer's batch, dynamic sampling, replay, explain, the expander, the verl/TRL/SkyRL
adapters and their records): a trajectory is trainable when its reward has status ``ok`` (so a
total); the number is the judge's normalised score when ``normalize`` (the run's
``judge.normalize``, the adapters' ``AgentSettings.normalize``), else the rubric total. It lives
here, below ``judge`` and ``tokens``, so every one of them can import it.

``normalize`` (the [0, 1] rule) is the judge's arithmetic; it sits here so the fallback for a
reward recorded without its normalised value is the same code the judge ran.
"""

from __future__ import annotations

from agentrl.errors import TrajectoryFormatError
from agentrl.trajectory.models import RewardBreakdown, Trajectory

__all__ = ["normalize", "normalized_reward", "training_reward"]


def _clip_ratio(total: float, positive_weight: float) -> float:
    return min(1.0, max(0.0, total / positive_weight))


def normalize(
    total: float, aggregation: str | None, positive_weight: float, negative_weight: float = 0.0
) -> float:
    """A total on [0, 1]: clip(total / ``positive_weight``, 0, 1), as the ``normalized`` aggregation
    gives. A rubric of flaws alone (no positive weight, ``negative_weight`` = Σ of its negative
    weights < 0) scores the share of its flaw weight the report avoided, 1 + total / |Σ negative|:
    1 with no flaw, 0 with every one. A total that is already normalised, or one with no weight at
    all to divide by (an unanswered episode's 0), is returned as it is."""
    if aggregation == "normalized":
        return total
    if positive_weight > 0:
        return _clip_ratio(total, positive_weight)
    if negative_weight < 0:
        return min(1.0, max(0.0, 1.0 + total / -negative_weight))
    return total


def normalized_reward(reward: RewardBreakdown | Trajectory) -> float:
    """The normalised reward of a scored trajectory (or of its ``RewardBreakdown``): the value the
    judge recorded, or for a reward recorded without one (older files, an unanswered episode's 0)
    the same ``normalize`` over its criteria, which a scored reward holds all of.

    Raises ``ValueError`` for a missing reward or a ``judge_error`` (they have no reward to train on),
    and ``TrajectoryFormatError`` when the value it would return is not on [0, 1] (a total recorded
    with neither ``normalized`` nor the criteria to divide it by, such as 5.0): the recorded
    ``normalized`` is checked where it is read (``RewardBreakdown``), and a computed one must hold
    the same rule rather than enter a mean of normalised rewards.
    """
    r = reward.reward if isinstance(reward, Trajectory) else reward
    if r is None or r.total is None:
        raise ValueError("no reward: the trajectory is unscored or a judge error")
    if r.normalized is not None:
        return r.normalized
    positive = sum(c.weight for c in r.criteria if c.weight > 0)
    value = normalize(r.total, r.aggregation, positive, sum(c.weight for c in r.criteria if c.weight < 0))
    if not 0.0 <= value <= 1.0:
        whose = f"trajectory {reward.id!r}: " if isinstance(reward, Trajectory) else ""
        raise TrajectoryFormatError(
            f"{whose}reward.total {r.total:g} has no normalised value on [0, 1]: the reward records "
            "neither reward.normalized nor criteria with weights to divide it by"
        )
    return value


def training_reward(reward: Trajectory | RewardBreakdown | None, normalize: bool) -> float | None:
    """The number a trainer trains ``reward`` (a trajectory or its reward) on, or None when it must
    not be trained on: unscored (no reward) or a ``judge_error`` (total null). The number is the
    judge's normalised score (``normalized_reward``) when ``normalize``, else the rubric total."""
    r = reward.reward if isinstance(reward, Trajectory) else reward
    if r is None or r.status != "ok" or r.total is None:
        return None
    return normalized_reward(r) if normalize else float(r.total)
