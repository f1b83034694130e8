"""Which rubric judges a trajectory, and the record of it that the trajectory keeps.

The rubric a reward came from travels with the trajectory: its content in ``info["rubric"]``, its
id and content hash in the reward. ``resolve_rubric`` is the one place that decides which rubric
applies (an explicit override, else the recorded one), for the trainer, ``agentrl judge``,
``agentrl replay`` and the engine adapters alike; ``record_reward`` is the one place that puts a
reward on a trajectory, with the rubric that produced it. So re-judging a stored trajectory without
an override uses exactly the rubric it was trained on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentrl.errors import ConfigError, MissingSetting
from agentrl.judge.credit import TURN_CREDIT, evidence_turn_credit
from agentrl.judge.rubric import Rubric, load_rubric, parse_rubric
from agentrl.trajectory import RewardBreakdown, Trajectory

__all__ = ["RUBRIC_OVERRIDE", "record_reward", "resolve_rubric", "rubric_record"]

#: The setting a ``MissingSetting`` names when a trajectory records no rubric and none was given.
RUBRIC_OVERRIDE = "rubric=..."


def resolve_rubric(trajectory: Trajectory, override: Rubric | None, *, base_dir: str | Path = ".") -> Rubric:
    """The rubric for a trajectory: ``override`` if given, else the recorded ``info["rubric"]`` (an
    inline mapping, or a path; ``info["task"]["rubric"]`` also works). A bare id names
    ``rubrics/<id>.yaml`` under ``base_dir``. Raises ``ConfigError``/``RubricError`` naming the problem."""
    if override is not None:
        return override
    info = trajectory.info or {}
    spec: Any = info.get("rubric")
    if spec is None and isinstance(info.get("task"), dict):
        spec = info["task"].get("rubric")
    if spec is None:
        raise MissingSetting(f"trajectory {trajectory.id!r} names no rubric (info.rubric)", RUBRIC_OVERRIDE)
    if isinstance(spec, dict):
        return parse_rubric(spec, source=f"trajectory {trajectory.id} info.rubric")
    if isinstance(spec, str):
        path = Path(base_dir, spec)
        if not path.exists() and "/" not in spec and not spec.endswith((".yaml", ".yml")):
            path = Path(base_dir, "rubrics", f"{spec}.yaml")
        return load_rubric(path)
    raise ConfigError(f"trajectory {trajectory.id!r}: info.rubric must be a path or a mapping")


def rubric_record(rubric: Rubric) -> dict[str, Any]:
    """The rubric's content as a plain mapping, the form ``info["rubric"]`` keeps (it parses back to
    a rubric with the same content hash)."""
    return rubric.model_dump(mode="json")


def record_reward(trajectory: Trajectory, reward: RewardBreakdown, rubric: Rubric) -> None:
    """Put ``reward`` on ``trajectory`` (in place) with the rubric that produced it: its content in
    ``info["rubric"]`` (the reward holds its id and hash), and the episode no longer waits for the judge.
    A trajectory that carries turn credit (``info["turn_credit"]``, the env's ``turn_credit:
    evidence``) gets it again from the new reward, so a re-judged episode never keeps stale credit."""
    trajectory.reward = reward
    trajectory.info["rubric"] = rubric_record(rubric)
    if TURN_CREDIT in trajectory.info:
        trajectory.info[TURN_CREDIT] = evidence_turn_credit(trajectory, rubric, reward)
    if "needs_judge" in trajectory.info:
        trajectory.info["needs_judge"] = False
