"""The LLM judge as an async Ray actor: one process, one event loop, bounded calls in flight.

Finished episodes whose rubric needs the LLM are sent here as they arrive, instead of in one
batch at the end, so judging overlaps with the episodes still running. Every call goes through the
one ``Judge`` of the actor, whose call pool keeps at most ``JudgeConfig.concurrency`` requests at
the judge server however many trajectories are waiting.
"""

from __future__ import annotations

from typing import Any

from agentrl.judge import Rubric, make_judge
from agentrl.rollout.ray_cluster import import_ray
from agentrl.trajectory import RewardBreakdown, Trajectory

__all__ = ["JudgeWorker", "start_judge"]


class JudgeWorker:
    """The actor side: a ``Judge`` built from a ``JudgeConfig`` mapping, shared by every call."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.judge = make_judge(config)

    async def ready(self) -> bool:
        """True once the actor runs."""
        return True

    async def score(self, trajectory: Trajectory, rubric: Rubric) -> RewardBreakdown:
        """The reward of one trajectory (a ``judge_error`` breakdown when the judge fails)."""
        return await self.judge.score(trajectory, rubric)

    async def close(self) -> None:
        """Stop the call workers and close the verdict cache."""
        self.judge.close()


def start_judge(config: dict[str, Any]) -> Any:
    """Start a ``JudgeWorker`` actor. It takes no CPU from the env workers (it waits on the network),
    and accepts any number of pending ``score`` calls; the judge's own pool bounds the calls in flight."""
    ray = import_ray()
    return ray.remote(num_cpus=0, max_concurrency=10_000)(JudgeWorker).remote(config)
