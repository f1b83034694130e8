"""The layout of a training run's directory, and its readers and writers: the one place that names
its files. ``agentrl train`` writes through it; replay, explain and ``agentrl report`` read through it.

::

    RUN_DIR/
      config.json                  the resolved TrainConfig (``config.yaml`` is read too, if hand-made)
      metrics.jsonl                one JSON object per RL step (verl's metric names)
      sft.jsonl                    warm-start losses, one line per supervised step
      summary.json                 first/last-window means, written when the run ends
      reward_curve.png             the reward per step
      report.html                  ``agentrl report``'s default output
      tokenizer/                   the tokenizer the run trained with (save_pretrained)
      sampling.json                the run's SamplingSpec: stop ids, limits, temperature, top-p
      tensorboard/                 optional TensorBoard events
      trajectories/step_NNNNN.jsonl  every trajectory of step N
      tokens/step_NNNNN.npz        the per-token numbers of step N's update (``write_token_stats``)
      eval/step_NNNNN.jsonl        the judged episodes of the evaluation after step N (0: before RL)
      audit/step_NNNNN.jsonl       the training episodes of step N the audit judge re-scored
      checkpoints/step_NNNNN/      state.pt (complete exactly when present), meta.json, manifest.json,
                                   sharded/ (FSDP)
      checkpoints/sft_NNNNN/       the same, at warm-start step N (before RL step 0; removed after it)
      vllm_sync/                   the weights a vLLM server reloads (``vllm.sync: full``, by default)
      .agentrl.lock                held by the one process writing the run (``agentrl.runlock``)

``LAYOUT`` lists every path above as a pattern, and it is the one rule of what agentrl wrote:
``RunDir.entries`` tells those (and the leftover temporary files of their atomic writes) from
anything else anywhere in the tree, so that ``agentrl train --overwrite`` deletes a run and nothing
that is not one (a file of yours inside ``trajectories/`` makes it refuse, naming the file).

A checkpoint is verified before it is trusted: ``manifest.json``, written after its other files,
records each one's size and sha256 (``write_checkpoint_manifest``); ``checkpoint_damage`` checks
them, and ``RunDir.resume_checkpoint`` goes on from the latest intact checkpoint, naming the damaged
ones, once the run's logs are seen to cover it (``RunDir.check_logs``).

This module holds ``RunDir``, the one object callers use; the rules live beside it, one idea a
module: ``layout`` (the names, ``LAYOUT`` and what ``--overwrite`` and a resume delete),
``atomic`` (atomic writes), ``logs`` (``metrics.jsonl`` and ``sft.jsonl``), ``checkpoints``
(finding and verifying checkpoints) and ``token_stats`` (the per-token ``.npz`` files).

Only the standard library and numpy are imported at module level; torch and yaml only by the
functions that need them.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.errors import AgentRLWarning, ConfigError
from agentrl.jsonl import finite_or_null
from agentrl.rundir import checkpoints as _checkpoints
from agentrl.rundir import layout as _layout
from agentrl.rundir import logs as _logs
from agentrl.rundir.atomic import write_atomic as _write_atomic
from agentrl.rundir.atomic import write_json
from agentrl.rundir.checkpoints import (
    checkpoint_damage,
    checkpoint_state_file,
    file_digest,
    load_error,
    run_of_checkpoint,
    write_checkpoint_manifest,
)
from agentrl.rundir.layout import (
    AUDIT,
    CHECKPOINTS,
    CONFIG,
    CONFIG_YAML,
    EVAL,
    LAYOUT,
    LOCK,
    MANIFEST,
    METRICS,
    OWNED,
    REPORT,
    REWARD_CURVE,
    SAMPLING,
    SFT,
    STATE,
    SUMMARY,
    TENSORBOARD,
    TOKENIZER,
    TOKENS,
    TRAJECTORIES,
    VLLM_SYNC,
    checkpoint_order,
    in_layout,
    sft_name,
    step_name,
    step_number,
)
from agentrl.rundir.layout import META as META
from agentrl.rundir.layout import SHARDED as SHARDED
from agentrl.rundir.logs import mend_jsonl_tail, read_jsonl
from agentrl.rundir.token_stats import read_token_stats, write_token_stats

__all__ = [
    "AUDIT",
    "CHECKPOINTS",
    "CONFIG",
    "CONFIG_YAML",
    "EVAL",
    "LAYOUT",
    "LOCK",
    "MANIFEST",
    "METRICS",
    "OWNED",
    "REPORT",
    "REWARD_CURVE",
    "SFT",
    "STATE",
    "SUMMARY",
    "TOKENIZER",
    "TOKENS",
    "TRAJECTORIES",
    "VLLM_SYNC",
    "RunDir",
    "checkpoint_damage",
    "checkpoint_order",
    "checkpoint_state_file",
    "file_digest",
    "in_layout",
    "load_error",
    "mend_jsonl_tail",
    "read_jsonl",
    "read_token_stats",
    "run_of_checkpoint",
    "sft_name",
    "step_name",
    "step_number",
    "write_checkpoint_manifest",
    "write_json",
    "write_token_stats",
]


class RunDir:
    """One run directory: the paths of its files, and readers (cached per instance) and writers.

    ``RunDir(path)`` makes no check (the trainer creates the directory); ``RunDir.open(path)``
    raises ``ConfigError`` when ``path`` is not a directory."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._config: dict[str, Any] | None = None
        self._stats: dict[int, dict[str, dict[str, np.ndarray]] | None] = {}

    @classmethod
    def open(cls, path: str | Path, what: str = "--run") -> RunDir:
        if not Path(path).is_dir():
            raise ConfigError(f"{what} {path}: no such run directory")
        return cls(path)

    # ---- paths -------------------------------------------------------------------------------------
    @property
    def config_file(self) -> Path:
        return self.path / CONFIG

    @property
    def metrics_file(self) -> Path:
        return self.path / METRICS

    @property
    def sft_file(self) -> Path:
        return self.path / SFT

    @property
    def summary_file(self) -> Path:
        return self.path / SUMMARY

    @property
    def reward_curve_file(self) -> Path:
        return self.path / REWARD_CURVE

    @property
    def report_file(self) -> Path:
        return self.path / REPORT

    @property
    def tokenizer_dir(self) -> Path:
        return self.path / TOKENIZER

    @property
    def sampling_file(self) -> Path:
        return self.path / SAMPLING

    @property
    def tensorboard_dir(self) -> Path:
        return self.path / TENSORBOARD

    @property
    def lock_file(self) -> Path:
        return self.path / LOCK

    @property
    def checkpoints_dir(self) -> Path:
        return self.path / CHECKPOINTS

    def trajectory_file(self, step: int) -> Path:
        return self.path / TRAJECTORIES / f"{step_name(step)}.jsonl"

    def eval_file(self, step: int) -> Path:
        """The judged episodes of the evaluation after RL step ``step`` (0: before the first)."""
        return self.path / EVAL / f"{step_name(step)}.jsonl"

    def audit_file(self, step: int) -> Path:
        """The episodes of training step ``step`` that the audit judge re-scored."""
        return self.path / AUDIT / f"{step_name(step)}.jsonl"

    def token_file(self, step: int) -> Path:
        return self.path / TOKENS / f"{step_name(step)}.npz"

    def checkpoint_dir(self, step: int) -> Path:
        return self.checkpoints_dir / step_name(step)

    def _step_files(self, folder: str, suffix: str) -> dict[int, Path]:
        d = self.path / folder
        if not d.is_dir():
            return {}
        pattern = re.compile(rf"step_(\d+){re.escape(suffix)}$")
        return {int(m.group(1)): p for p in d.iterdir() if (m := pattern.match(p.name))}

    def trajectory_files(self) -> dict[int, Path]:
        """Step → ``trajectories/step_NNNNN.jsonl``, for every step that stored its trajectories."""
        return self._step_files(TRAJECTORIES, ".jsonl")

    def eval_files(self) -> dict[int, Path]:
        """Step → ``eval/step_NNNNN.jsonl``, for every evaluation the run stored (0: before RL)."""
        return self._step_files(EVAL, ".jsonl")

    def token_files(self) -> dict[int, Path]:
        """Step → ``tokens/step_NNNNN.npz``, for every step that kept its per-token numbers."""
        return self._step_files(TOKENS, ".npz")

    def sft_checkpoint_dir(self, k: int) -> Path:
        return self.checkpoints_dir / sft_name(k)

    # ---- checkpoints (``checkpoints``) -------------------------------------------------------------
    complete_in = staticmethod(_checkpoints.complete_in)
    latest_in = staticmethod(_checkpoints.latest_in)

    def latest_checkpoint(self) -> Path | None:
        """The run's latest complete checkpoint directory, or None."""
        return self.latest_in(self.checkpoints_dir)

    def resume_checkpoint(self) -> Path | None:
        """The checkpoint ``--resume`` goes on from: the latest complete one that is intact
        (``checkpoint_damage``), each newer damaged one named in a warning; None when the run has
        no complete checkpoint. ``ConfigError`` naming the file when every one is damaged, or when
        the run's logs do not cover the one found (``check_logs``) or its tokenizer is gone
        (``check_tokenizer``)."""
        damaged: list[str] = []
        for ckpt in reversed(self.complete_in(self.checkpoints_dir)):
            why = checkpoint_damage(ckpt)
            if why is None:
                for d in damaged:
                    warnings.warn(
                        f"--resume: damaged checkpoint {d}; going on from {ckpt.name}",
                        AgentRLWarning,
                        stacklevel=2,
                    )
                self.check_logs(ckpt)
                self.check_tokenizer(ckpt)
                return ckpt
            damaged.append(why)
        if not damaged:
            return None
        more = f" (and the {len(damaged) - 1} before it)" if len(damaged) > 1 else ""
        raise ConfigError(
            f"--resume: no intact checkpoint to go on from: {damaged[0]}{more}; start over with --overwrite"
        )

    def check_logs(self, checkpoint: Path) -> None:
        """``ConfigError`` unless ``metrics.jsonl`` (``sft.jsonl`` for a warm-start checkpoint)
        holds every step ``checkpoint`` comes after, and for an RL checkpoint ``sft.jsonl`` the
        warm start's steps (the run's recorded ``sft_steps``; ``logs.check_logs``)."""
        warm = self.config().get("sft_steps") if self.config_file.is_file() else 0
        _logs.check_logs(self.path, checkpoint, int(warm or 0))

    def check_tokenizer(self, checkpoint: Path) -> None:
        """``ConfigError`` unless the run's ``tokenizer/`` is there: ``checkpoint``'s embeddings are
        rows of that tokenizer's ids, and a tokenizer made anew (trained again in-process, or a
        changed ``model.tokenizer``) would not match them."""
        tok = self.tokenizer_dir
        if (tok / "tokenizer.json").is_file() or (tok / "tokenizer_config.json").is_file():
            return
        name = checkpoint.relative_to(self.path) if checkpoint.is_relative_to(self.path) else checkpoint
        raise ConfigError(
            f"--resume: {tok} is missing, and {name} was trained with the run's tokenizer: the run's "
            "files disagree; put the run's tokenizer/ back, or start over with --overwrite"
        )

    # ---- what agentrl wrote (``layout``) -----------------------------------------------------------
    def entries(self) -> tuple[list[str], list[str]]:
        """(the names at the top that ``LAYOUT`` lists; the paths of everything anywhere in the
        tree that it does not), sorted (``layout.entries``)."""
        return _layout.entries(self.path)

    def clear(self) -> list[str]:
        """Delete what agentrl wrote here; ``ConfigError`` naming anything else, and then nothing is
        deleted (``layout.clear``). Returns the names deleted."""
        return _layout.clear(self.path)

    def forget_after(self, step: int) -> None:
        """Delete the step files of the steps after ``step`` and the temporary files of interrupted
        writes; only files ``LAYOUT`` lists (``layout.forget_after``)."""
        _layout.forget_after(self.path, step)

    # ---- readers -----------------------------------------------------------------------------------
    def is_run(self) -> bool:
        """Whether the directory holds a run's metrics or trajectories."""
        return self.metrics_file.exists() or bool(self.trajectory_files())

    def metrics(self) -> list[dict[str, Any]]:
        """The rows of ``metrics.jsonl`` (a torn last line skipped)."""
        return read_jsonl(self.metrics_file)

    def sft(self) -> list[dict[str, Any]]:
        """The rows of ``sft.jsonl``."""
        return read_jsonl(self.sft_file)

    def summary(self) -> dict[str, Any]:
        """``summary.json`` (``{}`` when absent); ``ConfigError`` when it is not a JSON object."""
        if not self.summary_file.exists():
            return {}
        try:
            data = json.loads(self.summary_file.read_text(encoding="utf-8"))
        except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
            raise ConfigError(f"{self.summary_file}: not valid JSON: {e}") from None
        return data if isinstance(data, dict) else {}

    def config(self) -> dict[str, Any]:
        """The run's training config as a plain dict (``{}`` when none is stored): ``config.json`` or
        ``config.yaml`` if the run has one, else the ``config`` of its latest checkpoint."""
        if self._config is not None:
            return self._config
        cfg: dict[str, Any] = {}
        if self.config_file.is_file():
            cfg = json.loads(self.config_file.read_text(encoding="utf-8"))
        elif (path := self.path / CONFIG_YAML).is_file():
            from agentrl.yamlload import load_yaml, read_text

            text = read_text(path, error=ConfigError, missing="no such file", what="run config")
            cfg = load_yaml(text, str(path), error=ConfigError)[0] or {}
            if not isinstance(cfg, dict):
                raise ConfigError(f"{path}: a training config must be a mapping, got {type(cfg).__name__}")
        elif (latest := self.latest_checkpoint()) is not None:
            import torch

            # mmap: the weights are not read, only the small config entry is touched.
            try:
                state = torch.load(latest / STATE, map_location="cpu", weights_only=False, mmap=True)
            except Exception as e:  # a damaged file: one line, never torch's traceback
                why = checkpoint_damage(latest) or f"{latest / STATE}: {type(e).__name__}"
                raise ConfigError(
                    f"{self.path} has no {CONFIG}, and its latest checkpoint is damaged: {why}"
                ) from None
            cfg = dict(state.get("config") or {})
        self._config = cfg
        return cfg

    def token_stats(self, step: int) -> dict[str, dict[str, np.ndarray]] | None:
        """The per-token numbers of step ``step``'s update, keyed by trajectory id (None when the run
        kept none for that step)."""
        if step not in self._stats:
            path = self.token_file(step)
            self._stats[step] = read_token_stats(path) if path.is_file() else None
        return self._stats[step]

    # ---- writers -----------------------------------------------------------------------------------
    def write_config(self, config: dict[str, Any]) -> Path:
        return write_json(self.config_file, config)

    def write_summary(self, summary: dict[str, Any]) -> Path:
        """``summary.json``; its copy of the last step's metrics writes an undefined one as null."""
        return write_json(self.summary_file, finite_or_null(summary))

    def append_metrics(self, row: dict[str, Any]) -> None:
        """Append one step's metrics to ``metrics.jsonl`` (flushed when this returns)."""
        with open(self.metrics_file, "a", encoding="utf-8") as f:
            f.write(_logs.metric_line(row))

    def rewrite_metrics(self, rows: list[dict[str, Any]]) -> None:
        """Replace ``metrics.jsonl`` with ``rows`` (a resumed run forgets the steps it recomputes)."""
        _write_atomic(self.metrics_file, "".join(_logs.metric_line(r) for r in rows).encode())

    def rewrite_sft(self, rows: list[dict[str, Any]]) -> None:
        """Replace ``sft.jsonl`` with ``rows`` (a run resumed inside its warm start)."""
        _write_atomic(self.sft_file, "".join(_logs.metric_line(r) for r in rows).encode())

    def append_sft(self, row: dict[str, Any]) -> None:
        with open(self.sft_file, "a", encoding="utf-8") as f:
            f.write(_logs.metric_line(row))

    def write_token_stats(self, step: int, stats: dict[str, dict[str, np.ndarray]]) -> Path:
        return write_token_stats(self.token_file(step), stats)
