"""One-step off-policy rollouts (``rollout.staleness: 1``): step k+1's episodes are sampled while
step k judges, expands and updates.

``OneStepOffPolicy`` wraps the run's rollout engine (``agentrl.sampling.engines``) and one background
thread. ``take(step)`` hands the trainer step ``step``'s trajectories — sampled in the background
during the previous step, or now when there are none (the first step of a run, a resume without a
pre-sampled batch) — and starts sampling step ``step + 1`` before returning, so that rollout runs
while the caller updates. The engine samples from its own copy of the weights (``HFSnapshotEngine``)
or from a server (``VLLMRollout``), never from the weights being updated. ``after_update`` only
notes the new version: the engine is synced (``engine.after_update``) at the next ``take``, after the
rollout in flight has finished, so a rollout is sampled by exactly one policy version and a sync
never runs under it.

Every trajectory gets ``info["policy_version"]``: the trainer step whose update produced the weights
that sampled it (0: the initial or warm-started weights). Step k's update is applied to version
k − 1, so its staleness is k − 1 − policy_version: 0 on-policy, 1 here from step 2 on.

A checkpoint keeps the pre-sampled batch (``pending()``, restored by ``restore``): it was sampled
by weights the checkpoint no longer holds, so storing it is the only way a resumed run continues
exactly as an uninterrupted one.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agentrl.rollout.episode import EpisodeSpec
from agentrl.sampling.engines import RolloutEngine
from agentrl.trajectory import Trajectory

__all__ = ["OneStepOffPolicy", "Presampled", "stamp_version"]

VERSION_KEY = "policy_version"


def stamp_version(trajs: Sequence[Trajectory], version: int) -> None:
    """Record on each trajectory the policy version that sampled it (``info["policy_version"]``)."""
    for t in trajs:
        t.info[VERSION_KEY] = version


@dataclass
class Presampled:
    """A batch sampled ahead: the step it is for, the version that sampled it, its trajectories."""

    step: int
    version: int
    trajectories: list[Trajectory]

    def to_dict(self) -> dict[str, Any]:
        """Plain data for a checkpoint (trajectories as their canonical JSON lines)."""
        lines = [t.to_json() for t in self.trajectories]
        return {"step": self.step, "version": self.version, "trajectories": lines}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Presampled:
        trajs = [Trajectory.from_json(line) for line in data["trajectories"]]
        return cls(int(data["step"]), int(data["version"]), trajs)


class OneStepOffPolicy:
    """The rollout of step k+1 in a background thread while step k updates (see the module docstring).

    ``jobs(step)`` gives a step's episode specs; ``envs(n)`` the env pool grown to ``n`` envs (one
    rollout at a time uses it). ``threads``: the sampler thread's torch thread count, set in that
    thread (torch's count is only partly per thread: MKL's is, OpenMP's is shared); None: as is.
    """

    def __init__(
        self,
        engine: RolloutEngine,
        *,
        jobs: Callable[[int], list[EpisodeSpec]],
        envs: Callable[[int], Sequence[Any]],
        last_step: int,
        threads: int | None = None,
    ) -> None:
        self.engine, self.jobs, self.envs, self.last_step = engine, jobs, envs, last_step
        self._pool = cf.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="agentrl-rollout", initializer=_set_threads, initargs=(threads,)
        )
        self._flight: tuple[int, int, cf.Future[list[Trajectory]]] | None = None
        self._ready: Presampled | None = None
        self._sync: tuple[torch.nn.Module, int] | None = None  # the newest update, not yet synced
        self._version: int | None = None  # what the engine samples from; None: not prepared yet

    def take(self, step: int, version: int) -> list[Trajectory]:
        """Step ``step``'s trajectories, stamped with their policy version; then step ``step + 1``
        starts sampling in the background. ``version`` is the trainer's current one: the engine
        takes it (``engine.prepare``) when it has not sampled yet."""
        batch = self._settle()
        self._ready = None
        self._apply_sync()
        if batch is None or batch.step != step:  # nothing sampled ahead for this step: sample now
            jobs = self.jobs(step)
            sampled_by = self._prepare(version)
            batch = Presampled(step, sampled_by, self.engine.rollout(self.envs(len(jobs)), jobs))
        stamp_version(batch.trajectories, batch.version)
        if step < self.last_step:
            jobs = self.jobs(step + 1)
            envs, sampled_by = self.envs(len(jobs)), self._prepare(version)
            self._flight = (step + 1, sampled_by, self._pool.submit(self.engine.rollout, envs, jobs))
        return batch.trajectories

    def after_update(self, model: torch.nn.Module, step: int) -> None:
        """Note that ``model`` is now version ``step``; the engine samples it from the next ``take``
        on (the rollout in flight keeps the version it started with)."""
        self._sync = (model, step)

    def pending(self) -> Presampled | None:
        """The batch sampled ahead (waiting for the rollout in flight to finish), for a checkpoint."""
        self._ready = self._settle()
        return self._ready

    def restore(self, batch: Presampled | None) -> None:
        """Take ``batch`` (from a checkpoint) as the one sampled ahead."""
        self._ready = batch

    def close(self) -> None:
        """Finish the rollout in flight, sync the last update (a server then serves the final
        weights, as with ``staleness: 0``) and stop the thread."""
        try:
            if self._flight is not None and self._flight[2].exception() is not None:
                self._flight = None  # the run stops on another error: this one goes with it
            self._settle()
            self._apply_sync()
        finally:
            self._pool.shutdown(wait=True)
            self.engine.close()

    # ---- internals ---------------------------------------------------------------------------------
    def _settle(self) -> Presampled | None:
        """Wait for the rollout in flight, if any; the batch sampled ahead, if any."""
        if self._flight is not None:
            step, version, future = self._flight
            self._flight = None
            self._ready = Presampled(step, version, future.result())
        return self._ready

    def _prepare(self, version: int) -> int:
        """Before the first rollout the engine takes the current weights, ``version`` (on this
        thread, never the sampler's); returns the version the engine samples from."""
        if self._version is None:
            self.engine.prepare()
            self._version = version
        return self._version

    def _apply_sync(self) -> None:
        """Sync the newest update into the engine; only called with no rollout in flight."""
        assert self._flight is None
        if self._sync is not None and self._version is not None:
            model, step = self._sync
            self.engine.after_update(model, step)
            self._version = step
        self._sync = None


def _set_threads(threads: int | None) -> None:
    if threads is not None:
        torch.set_num_threads(threads)
