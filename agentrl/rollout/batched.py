"""A policy that samples tokens for many episodes at once (a local model: ``--policy hf:PATH``).

A ``BatchedPolicy`` wraps a rollout engine's ``rollout(envs, specs)``: it runs a batch of episodes
through the one episode loop (``agentrl.rollout.episode``) in lock-step and returns their
trajectories, with the sampled ids and log-probs (token-in-token-out). ``run_rollout`` hands it
``concurrency`` episodes at a time. The object is built above this layer
(``agentrl.train.hf_policy`` wraps the trainer's own ``HFEngine``, so a rollout samples exactly as
training does).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentrl.rollout.episode import EpisodeSpec
from agentrl.trajectory import Trajectory

__all__ = ["BatchedPolicy"]


@dataclass
class BatchedPolicy:
    """``name`` (recorded as ``info.policy``), ``rollout`` (blocking: one env per spec, one
    trajectory per spec, in order) and ``close`` (what to release at the end)."""

    name: str
    rollout: Callable[[Sequence[Any], Sequence[EpisodeSpec]], list[Trajectory]]
    close: Callable[[], Any] = field(default=lambda: None)

    async def aclose(self) -> None:
        """Release the model (the runner calls it once at the end)."""
        self.close()
