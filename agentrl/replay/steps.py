"""A training run's directory, read back: its config, its tokenizer, and the per-token numbers each
update used (``tokens/step_NNNNN.npz``, written by ``agentrl.train.token_log``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.errors import ConfigError
from agentrl.trajectory import Trajectory

__all__ = ["RunDir", "step_of"]


def step_of(traj: Trajectory, source: str | Path | None = None) -> int | None:
    """The training step a trajectory came from: ``info.step``, else the ``step_NNNNN`` file name."""
    step = (traj.info or {}).get("step")
    if isinstance(step, int | float) and not isinstance(step, bool):
        return int(step)
    if source is not None:
        stem = Path(source).stem
        if stem.startswith("step_") and stem[5:].isdigit():
            return int(stem[5:])
    return None


class RunDir:
    """``RunDir(path)``: lazy readers over ``metrics.jsonl``, ``trajectories/``, ``tokenizer/``,
    ``checkpoints/`` and ``tokens/`` of one ``agentrl train`` output directory."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise ConfigError(f"--run {path}: no such run directory")
        self._config: dict[str, Any] | None = None
        self._stats: dict[int, dict[str, dict[str, np.ndarray]] | None] = {}

    def config(self) -> dict[str, Any]:
        """The run's training config as a plain dict (``{}`` when none is stored): ``config.json`` or
        ``config.yaml`` if the run has one, else the ``config`` of its latest checkpoint."""
        if self._config is not None:
            return self._config
        cfg: dict[str, Any] = {}
        if (self.path / "config.json").is_file():
            cfg = json.loads((self.path / "config.json").read_text(encoding="utf-8"))
        elif (self.path / "config.yaml").is_file():
            import yaml

            cfg = yaml.safe_load((self.path / "config.yaml").read_text(encoding="utf-8")) or {}
        else:
            found = sorted(p for p in (self.path / "checkpoints").glob("step_*") if (p / "state.pt").exists())
            if found:
                import torch

                # mmap: the weights are not read, only the small config entry is touched.
                state = torch.load(found[-1] / "state.pt", map_location="cpu", weights_only=False, mmap=True)
                cfg = dict(state.get("config") or {})
        self._config = cfg
        return cfg

    def token_stats(self, step: int) -> dict[str, dict[str, np.ndarray]] | None:
        """The per-token numbers of step ``step``'s update, keyed by trajectory id (None when the run
        kept none for that step)."""
        if step not in self._stats:
            path = self.path / "tokens" / f"step_{step:05d}.npz"
            if path.is_file():
                from agentrl.train.token_log import read_token_stats

                self._stats[step] = read_token_stats(path)
            else:
                self._stats[step] = None
        return self._stats[step]
