"""Checkpoints: model, critic, optimisers, schedulers, KL coefficient, step and every RNG state,
so that ``agentrl train --resume`` continues exactly where a run stopped."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentrl.rundir import META, SHARDED, STATE, step_name
from agentrl.train.distributed import barrier, is_main

__all__ = ["load_checkpoint", "save_checkpoint"]


def save_checkpoint(
    directory: Path, step: int, state: dict[str, Any], *, sharded: dict[str, Any] | None = None
) -> Path:
    """Write ``state`` (state dicts and plain values) to ``directory/step_NNNNN`` atomically.

    With ``sharded`` (FSDP state dicts of DTensors), every rank must call this: each writes its own
    shards under ``step_NNNNN/sharded`` with ``torch.distributed.checkpoint``, and rank 0 writes
    ``state.pt`` last, so a checkpoint is complete exactly when ``state.pt`` exists."""
    final = directory / step_name(step)
    tmp = directory / f".{step_name(step)}.tmp"
    if is_main():
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
    if sharded is not None:
        import torch.distributed.checkpoint as dcp

        barrier()
        dcp.save(sharded, checkpoint_id=str(tmp / SHARDED))
        barrier()
    if is_main():
        rng = {
            "python": random.getstate(),
            "numpy": np.random.get_state(),
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        }
        torch.save({**state, "step": step, "rng": rng}, tmp / STATE)
        (tmp / META).write_text(json.dumps({"step": step, "sharded": sharded is not None}))
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    if sharded is not None:
        barrier()
    return final


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load a checkpoint and restore the RNG states; returns the saved state (``step`` included)."""
    state = torch.load(path / STATE, map_location="cpu", weights_only=False)
    rng = state["rng"]
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    if rng["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    return state
