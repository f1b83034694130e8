"""When a run checkpoints, what a checkpoint holds, how many are kept, and where a resume starts.

A run checkpoints during the warm start (every ``sft_checkpoint_every`` supervised steps:
``checkpoints/sft_NNNNN``, with the warm start's optimiser and batch sampler), at its end (RL step 0:
the warm-started policy and reference), every ``checkpoint_every`` RL steps, and at the end of the
run; after each, ``prune_checkpoints`` keeps the last ``checkpoint_keep`` RL checkpoints and drops
the warm-start ones once RL step 0 is saved. ``--resume`` continues from the latest complete
checkpoint, whichever kind: randomness is derived from (seed, step) and every RNG state is saved, so
the resumed run ends with the metrics an uninterrupted one has. A run killed before its first
checkpoint has nothing to continue: the trainer starts it over (``agentrl.train.preflight``).

A mixin of ``Trainer``: it reads the trainer's config, models, sampler, logs and output directory.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import torch

from agentrl.rundir import RunDir, checkpoint_order
from agentrl.sampling.overlap import OneStepOffPolicy, Presampled
from agentrl.train.checkpoint import TrainState, prune_checkpoints, restore_run, save_run
from agentrl.train.config import TrainConfig
from agentrl.train.distributed import all_gather_objects, rank, world_size
from agentrl.train.report import RunLog

__all__ = ["Checkpointing", "is_warm_start_checkpoint"]


def is_warm_start_checkpoint(path: Path | None) -> bool:
    """Whether ``path`` is a warm-start checkpoint (``sft_NNNNN``), taken before RL step 0."""
    return path is not None and (checkpoint_order(path) or (1, 0))[0] == 0


class Checkpointing:
    """The checkpoint half of a ``Trainer`` (see the module docstring)."""

    cfg: TrainConfig
    out: Path
    step: int
    models: Any
    sampler: OneStepOffPolicy | None
    log: RunLog | None
    model: torch.nn.Module
    _presampled: Presampled | None
    #: Where the warm start goes on from (0: its beginning), or None: no warm start left to run.
    warm_from: int | None = 0
    #: The warm start's optimiser and batch sampler (set up when a warm start is left to run).
    sft_opt: torch.optim.Optimizer | None = None
    sft_rng: random.Random | None = None
    #: Seconds each checkpoint took to write (``agentrl report`` and the benchmark read them).
    checkpoint_seconds: list[float]

    # ---- where a resume starts ----------------------------------------------------------------------
    def resume_point(self, resume: bool) -> Path | None:
        """The checkpoint a resume continues (None: a fresh start) and, from it, ``warm_from``: the
        latest intact one whose steps the logs hold (``RunDir.resume_checkpoint``)."""
        latest = RunDir(self.out).resume_checkpoint() if resume else None
        if latest is None:
            self.warm_from = 0
        elif is_warm_start_checkpoint(latest):
            self.warm_from = (checkpoint_order(latest) or (0, 0))[1]
        else:
            self.warm_from = None
        return latest

    # ---- writing -----------------------------------------------------------------------------------
    def save(self) -> Path | None:
        """Write a checkpoint of the current RL step; call it on every rank (FSDP ranks each write
        their shards with ``torch.distributed.checkpoint``; otherwise rank 0 writes everything)."""
        ms = self.models
        state = TrainState(self.step, ms.sched.state_dict(), ms.kl_ctrl.value, self.cfg.model_dump(mode="json"),
                           sharded=ms.fsdp, presampled=self._pending())  # fmt: skip
        return self._write(state, ms.checkpointed())

    def save_warm(self, k: int) -> Path | None:
        """Write a warm-start checkpoint after supervised step ``k`` (every rank calls it)."""
        ms, rng = self.models, self.sft_rng
        state = TrainState(0, ms.sched.state_dict(), ms.kl_ctrl.value, self.cfg.model_dump(mode="json"),
                           sharded=ms.fsdp, sft={"step": k, "rng": rng.getstate() if rng else None})  # fmt: skip
        return self._write(state, self._warm_modules())

    def saved(self) -> bool:
        """Whether the current RL step is checkpointed already (every rank agrees: no file is read)."""
        return getattr(self, "_saved", None) == ("step", self.step)

    def _write(self, state: TrainState, modules: Any) -> Path | None:
        t0 = time.perf_counter()
        path = save_run(RunDir(self.out).checkpoints_dir, state, modules)
        self._saved = ("sft", state.sft["step"]) if state.sft is not None else ("step", state.step)
        prune_checkpoints(RunDir(self.out).checkpoints_dir, self.cfg.checkpoint_keep)
        if not hasattr(self, "checkpoint_seconds"):
            self.checkpoint_seconds = []
        self.checkpoint_seconds.append(time.perf_counter() - t0)
        return path

    def _warm_modules(self) -> Any:
        """The checkpointed modules with the warm start's optimiser in place of the RL one."""
        mods = dict(self.models.checkpointed())
        mods["model"] = (mods["model"][0], self.sft_opt)
        return mods

    def _pending(self) -> list[dict[str, Any]] | None:
        """Staleness 1: every rank's batch sampled ahead (rank 0 writes them into the checkpoint)."""
        ahead = self.sampler.pending() if self.sampler is not None else None
        parts = all_gather_objects(None if ahead is None else ahead.to_dict())
        return None if any(p is None for p in parts) else parts

    # ---- reading -----------------------------------------------------------------------------------
    def _restore(self, path: Path) -> None:
        """Load the checkpoint at ``path``: an RL one sets the step (and the batch sampled ahead); a
        warm-start one the warm start's optimiser, batch sampler and ``warm_from``. Later metrics,
        trajectories and warm-start losses are forgotten (the run recomputes them)."""
        warm = is_warm_start_checkpoint(path)
        modules = self._warm_modules() if warm else self.models.checkpointed()
        state = restore_run(path, modules, sharded=self.models.fsdp)
        self.models.sched.load_state_dict(state.scheduler)
        self.models.kl_ctrl.value = state.kl_coef
        self.step = state.step
        if warm and state.sft is not None:
            self.warm_from = int(state.sft["step"])
            if self.sft_rng is not None and state.sft.get("rng") is not None:
                self.sft_rng.setstate(state.sft["rng"])
        if state.presampled is not None and len(state.presampled) == world_size():
            self._presampled = Presampled.from_dict(state.presampled[rank()])  # else: sampled again
        if self.log is not None:
            self.log.truncate_after(self.step, sft_step=self.warm_from)
