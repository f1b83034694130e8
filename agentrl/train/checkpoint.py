"""Checkpoints: model, critic, optimisers, schedulers, KL coefficient, step and every RNG state,
so that ``agentrl train --resume`` continues exactly where a run stopped.

``TrainState`` is the run's state besides the weights (step, scheduler, KL coefficient, config and
its hash); ``save_run`` writes it with the modules of ``build.Models.checkpointed()`` and
``restore_run`` reads both back. ``state.pt`` keeps the keys it always had (``step``, ``scheduler``,
``kl_coef``, ``config``, ``rng``, ``sharded``, ``model``, ``optimizer``, ``critic``,
``critic_optimizer``, ``ref``), so older checkpoints load; ``config_hash`` is new (absent: ""), and
``presampled`` (a ``rollout.staleness: 1`` run's batch sampled ahead) is written only when there is one,
``sft`` (the warm-start step and its batch sampler's state) only in a warm-start checkpoint
(``checkpoints/sft_NNNNN``, whose ``optimizer`` is the warm start's). ``prune_checkpoints`` keeps
the last few. Each checkpoint carries a ``manifest.json`` (sizes and sha256 of its files), verified
before a resume trusts it (``agentrl.rundir.RunDir.resume_checkpoint``)."""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentrl.errors import ConfigError
from agentrl.outputs import torch_save
from agentrl.rundir import (
    META,
    SHARDED,
    STATE,
    RunDir,
    checkpoint_order,
    load_error,
    sft_name,
    step_name,
    write_checkpoint_manifest,
)
from agentrl.train.distributed import barrier, is_main
from agentrl.train.fsdp import load_sharded, sharded_state

__all__ = [
    "TrainState",
    "config_hash",
    "load_checkpoint",
    "prune_checkpoints",
    "restore_run",
    "save_checkpoint",
    "save_run",
]

Modules = dict[str, tuple[torch.nn.Module, torch.optim.Optimizer | None]]


def config_hash(config: dict[str, Any]) -> str:
    """sha256 of a config's canonical JSON (what a checkpoint was trained with)."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


@dataclass
class TrainState:
    """A run's state besides weights and RNG (the RNG states are saved and restored with it)."""

    step: int
    scheduler: dict[str, Any]
    kl_coef: float
    config: dict[str, Any]
    sharded: bool = False
    config_hash: str = ""
    presampled: list[dict[str, Any]] | None = None  # staleness 1: each rank's batch sampled ahead
    sft: dict[str, Any] | None = None  # a warm-start checkpoint: {"step": k, "rng": batch sampler state}
    fresh_optimizers: list[str] | None = None  # sharded: the modules whose optimiser had not stepped

    def to_dict(self) -> dict[str, Any]:
        out = {
            "scheduler": self.scheduler,
            "kl_coef": self.kl_coef,
            "config": self.config,
            "sharded": self.sharded,
            "config_hash": self.config_hash or config_hash(self.config),
        }
        if self.presampled is not None:
            out["presampled"] = self.presampled
        if self.sft is not None:
            out["sft"] = self.sft
        if self.fresh_optimizers:
            out["fresh_optimizers"] = self.fresh_optimizers
        return out

    @property
    def name(self) -> str:
        """Its directory under ``checkpoints/``: ``sft_NNNNN`` or ``step_NNNNN``."""
        return sft_name(int(self.sft["step"])) if self.sft is not None else step_name(self.step)

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> TrainState:
        return cls(
            step=int(state["step"]),
            scheduler=state["scheduler"],
            kl_coef=float(state["kl_coef"]),
            config=state.get("config", {}),
            sharded=bool(state.get("sharded")),
            config_hash=state.get("config_hash", ""),
            presampled=state.get("presampled"),
            sft=state.get("sft"),
            fresh_optimizers=state.get("fresh_optimizers"),
        )


def _optimizer_key(name: str) -> str:
    return "optimizer" if name == "model" else f"{name}_optimizer"


def save_run(directory: Path, state: TrainState, modules: Modules) -> Path | None:
    """Checkpoint step ``state.step``; call it on every rank. Sharded (FSDP) ranks each write their
    shards with ``torch.distributed.checkpoint``; otherwise rank 0 writes everything (None elsewhere)."""
    if state.sharded:
        # torch.distributed.checkpoint builds an optimiser's state by stepping it with zero gradients
        # and lr 0 when it has none (Adam's step count then starts at 1): the optimisers that had not
        # stepped yet (RL's, at the end of the warm start) are put back as they were, and named in
        # the checkpoint so that a resume puts them back the same way.
        fresh = [name for name, (_, opt) in modules.items() if opt is not None and not opt.state]
        state = replace(state, fresh_optimizers=fresh or None)
        path = save_checkpoint(
            directory, state.step, state.to_dict(), sharded=sharded_state(modules), name=state.name
        )
        _reset(modules, fresh)
        return path
    if not is_main():
        return None
    full = state.to_dict()
    for name, (module, opt) in modules.items():
        full[name] = module.state_dict()
        if opt is not None:
            full[_optimizer_key(name)] = opt.state_dict()
    return save_checkpoint(directory, state.step, full, name=state.name)


def _reset(modules: Modules, names: list[str]) -> None:
    """Empty the state of the optimisers of ``names`` (as before their first step)."""
    for name in names:
        opt = modules[name][1] if name in modules else None
        if opt is not None:
            opt.state.clear()


def restore_run(path: Path, modules: Modules, *, sharded: bool) -> TrainState:
    """Load the checkpoint at ``path`` into ``modules`` (in place), restore the RNG states and return
    its ``TrainState``; a checkpoint written the other way (FSDP or not) is a ``ConfigError``."""
    full = load_checkpoint(path)
    state = TrainState.from_dict(full)
    if state.sharded != sharded:
        raise ConfigError(
            f"--resume: {path} was written with parallelism {'fsdp' if state.sharded else 'ddp'}; "
            f"resume it the same way"
        )
    if sharded:
        load_sharded(path / SHARDED, modules)
        _reset(modules, state.fresh_optimizers or [])
        return state
    for name, (module, opt) in modules.items():
        if name == "model" or name in full:
            try:
                module.load_state_dict(full[name])
            except RuntimeError as e:  # missing or unexpected keys, other shapes: another model
                raise ConfigError(
                    f"--resume: {path} does not fit the {name} the config builds ({_misfit(module, full[name], e)}); "
                    f"resume with the run's model settings (its config.json), or start over with --overwrite"
                ) from None
            if opt is not None:
                opt.load_state_dict(full[_optimizer_key(name)])
    return state


def _misfit(module: torch.nn.Module, saved: dict[str, Any], error: Exception) -> str:
    """What differs between ``module`` and the state dict ``saved`` it failed to load, in a few words."""
    want = module.state_dict()
    missing = [k for k in want if k not in saved]
    extra = [k for k in saved if k not in want]
    shapes = [k for k in want if k in saved and tuple(want[k].shape) != tuple(saved[k].shape)]
    parts = [f"{len(missing)} weights it lacks, e.g. {missing[0]}"] if missing else []
    parts += [f"{len(extra)} weights the model has not, e.g. {extra[0]}"] if extra else []
    if shapes:
        k = shapes[0]
        parts.append(
            f"{len(shapes)} of other shapes, e.g. {k}: {tuple(saved[k].shape)} saved, "
            f"{tuple(want[k].shape)} built"
        )
    return "; ".join(parts) or str(error).splitlines()[0]


def save_checkpoint(
    directory: Path,
    step: int,
    state: dict[str, Any],
    *,
    sharded: dict[str, Any] | None = None,
    name: str | None = None,
) -> Path:
    """Write ``state`` (state dicts and plain values) to ``directory/step_NNNNN`` (or ``name``) atomically,
    with a ``manifest.json`` of every file's size and sha256 (``agentrl.rundir.checkpoint_damage``
    checks them before a resume trusts the checkpoint).

    With ``sharded`` (FSDP state dicts of DTensors), every rank must call this: each writes its own
    shards under ``step_NNNNN/sharded`` with ``torch.distributed.checkpoint``, and rank 0 writes
    ``state.pt`` last, so a checkpoint is complete exactly when ``state.pt`` exists."""
    name = name or step_name(step)
    final = directory / name
    tmp = directory / f".{name}.tmp"
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
        torch_save({**state, "step": step, "rng": rng}, tmp / STATE)  # a full disk: OSError naming it
        (tmp / META).write_text(json.dumps({"step": step, "sharded": sharded is not None}))
        write_checkpoint_manifest(tmp)  # last: what a resume verifies before it trusts the files
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    if sharded is not None:
        barrier()
    return final


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load a checkpoint and restore the RNG states; returns the saved state (``step`` included).
    A file torch cannot load is a ``ConfigError`` naming it (``RunDir.resume_checkpoint`` has
    verified the checkpoint; this is the last line of defence, e.g. a file damaged since)."""
    try:
        state = torch.load(path / STATE, map_location="cpu", weights_only=False)
    except Exception as e:  # PytorchStreamReader, UnpicklingError, EOFError ...: never a traceback
        raise ConfigError(f"{path / STATE}: a damaged checkpoint ({load_error(e)})") from None
    rng = state["rng"]
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    if rng["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    return state


def prune_checkpoints(directory: Path, keep: int) -> list[Path]:
    """Delete the checkpoints under ``directory`` that a resume no longer needs: every warm-start one
    (``sft_*``) once an RL one (``step_*``) is complete, and all but the last ``keep`` RL ones
    (``keep`` 0: none of those). Returns the paths deleted (rank 0 only; elsewhere nothing)."""
    if not is_main():
        return []
    complete = RunDir.complete_in(directory)
    steps = [p for p in complete if (checkpoint_order(p) or (0, 0))[0] == 1]
    doomed = [p for p in complete if p not in steps] if steps else []
    if keep > 0:
        doomed += steps[:-keep]
    for p in doomed:
        shutil.rmtree(p, ignore_errors=True)
    return doomed
