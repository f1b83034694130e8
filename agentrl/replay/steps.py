"""Which training step a stored trajectory came from (a run's own directory is read through
``agentrl.rundir.RunDir``)."""

from __future__ import annotations

from pathlib import Path

from agentrl.rundir import step_number
from agentrl.trajectory import Trajectory

__all__ = ["step_of"]


def step_of(traj: Trajectory, source: str | Path | None = None) -> int | None:
    """The training step a trajectory came from: ``info.step``, else the ``step_NNNNN`` file name."""
    step = (traj.info or {}).get("step")
    if isinstance(step, int | float) and not isinstance(step, bool):
        return int(step)
    return step_number(source) if source is not None else None
