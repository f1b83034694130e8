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
      checkpoints/step_NNNNN/      state.pt (complete exactly when present), meta.json, sharded/ (FSDP)
      checkpoints/sft_NNNNN/       the same, at warm-start step N (before RL step 0; removed after it)
      vllm_sync/                   the weights a vLLM server reloads (``vllm.sync: full``, by default)
      .agentrl.lock                held by the one process writing the run (``agentrl.runlock``)

``RunDir.entries`` tells the names agentrl writes (``OWNED``) from anything else in the directory, so
that ``agentrl train --overwrite`` deletes a run and nothing that is not one.

Only the standard library and numpy are imported at module level; torch and yaml only by the
functions that need them.
"""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.errors import ConfigError
from agentrl.jsonl import line_text, read_records

__all__ = [
    "AUDIT",
    "CHECKPOINTS",
    "CONFIG",
    "CONFIG_YAML",
    "EVAL",
    "LOCK",
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
    "checkpoint_order",
    "checkpoint_state_file",
    "mend_jsonl_tail",
    "read_jsonl",
    "read_token_stats",
    "sft_name",
    "step_name",
    "step_number",
    "write_json",
    "write_token_stats",
]

CONFIG = "config.json"
CONFIG_YAML = "config.yaml"
METRICS = "metrics.jsonl"
SFT = "sft.jsonl"
SUMMARY = "summary.json"
REWARD_CURVE = "reward_curve.png"
REPORT = "report.html"
TOKENIZER = "tokenizer"
#: The run's sampling spec (``agentrl.tokens.spec``): stop ids, limits, temperature, top-p.
SAMPLING = "sampling.json"
TENSORBOARD = "tensorboard"
TRAJECTORIES = "trajectories"
TOKENS = "tokens"
CHECKPOINTS = "checkpoints"
VLLM_SYNC = "vllm_sync"
EVAL = "eval"
AUDIT = "audit"
#: The lock file of the process writing the run; neither the run's nor foreign (``entries``).
LOCK = ".agentrl.lock"
#: The entries agentrl itself writes at the top of a run directory (``config.yaml`` is the user's).
OWNED = frozenset(
    {CONFIG, METRICS, SFT, SUMMARY, REWARD_CURVE, REPORT, TOKENIZER, SAMPLING, TENSORBOARD, TRAJECTORIES,
     TOKENS, CHECKPOINTS, VLLM_SYNC, EVAL, AUDIT}
)  # fmt: skip
#: Inside one checkpoint directory ``checkpoints/step_NNNNN/``.
STATE = "state.pt"
META = "meta.json"
SHARDED = "sharded"

_STEP = re.compile(r"step_(\d+)$")
_CHECKPOINT = re.compile(r"(sft|step)_(\d+)$")
# The temporary file of an atomic write (``_replace``, ``write_trajectories``): ``.NAME.tmp-PID``.
_TMP = re.compile(r"^\.(.+)\.tmp-\d+$")


def step_name(step: int) -> str:
    """``step_NNNNN``: the stem of step ``step``'s files and of its checkpoint directory."""
    return f"step_{step:05d}"


def sft_name(k: int) -> str:
    """``sft_NNNNN``: the directory of the checkpoint taken at warm-start step ``k``."""
    return f"sft_{k:05d}"


def checkpoint_order(path: str | Path) -> tuple[int, int] | None:
    """Where a checkpoint directory's name puts it in the run: ``(0, k)`` for ``sft_k`` (warm-start
    step k), ``(1, n)`` for ``step_n`` (after RL step n; step 0 is the end of the warm start);
    None for any other name."""
    m = _CHECKPOINT.match(Path(path).name)
    return None if m is None else (int(m.group(1) == "step"), int(m.group(2)))


def step_number(path: str | Path) -> int | None:
    """The step of a ``step_NNNNN[.ext]`` file or directory name, or None for any other name."""
    m = _STEP.match(Path(path).name.split(".", 1)[0])
    return int(m.group(1)) if m else None


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file (``[]`` when it does not exist), read a line at a time
    (``agentrl.jsonl``). A torn last line (a live or killed run) is skipped with a note; a bad line
    elsewhere, a line that is not UTF-8 JSON or one too long is a ``ConfigError`` naming ``path:line``."""
    if not path.exists():
        return []

    def row(line: bytes, lineno: int) -> Any:
        text = line_text(line, path, lineno)
        try:
            return json.loads(text)
        except (ValueError, RecursionError) as e:  # JSONDecodeError; nesting too deep
            raise ConfigError(f"{path}:{lineno}: not a JSON line: {e}") from None

    return [r for r in read_records(path, row) if isinstance(r, dict)]


def mend_jsonl_tail(path: Path) -> int:
    """Make an append-only JSONL file end on a whole line before more is appended to it: a torn last
    line (no newline, not JSON: a run killed mid-write) is cut off, a JSON last line that only lacks
    its newline gets one. Reads the last line only. Returns the bytes cut (0 when none)."""
    if not path.is_file():
        return 0
    with open(path, "r+b") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return 0
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return 0
        start, pos = 0, size
        while pos > 0:  # back to the last newline, a block at a time
            n = min(1 << 16, pos)
            pos -= n
            f.seek(pos)
            i = f.read(n).rfind(b"\n")
            if i >= 0:
                start = pos + i + 1
                break
        f.seek(start)
        try:
            json.loads(f.read())
        except ValueError:  # UnicodeDecodeError included
            f.truncate(start)
            return size - start
        f.seek(0, os.SEEK_END)
        f.write(b"\n")
        return 0


def _replace(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (a temporary file beside it, then a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_json(path: Path, data: Any) -> Path:
    """``data`` as indented JSON (with a final newline), written atomically."""
    _replace(path, (json.dumps(data, indent=2) + "\n").encode())
    return path


def checkpoint_state_file(path: str | Path) -> Path | None:
    """The ``state.pt`` that ``path`` names: the file itself, a ``step_NNNNN`` checkpoint directory,
    a ``checkpoints/`` directory or a run directory (then its latest complete checkpoint); None
    when there is none."""
    path = Path(path)
    if path.is_file():
        return path
    if (path / STATE).is_file():
        return path / STATE
    for d in (path, path / CHECKPOINTS):
        latest = RunDir.latest_in(d)
        if latest is not None:
            return latest / STATE
    return None


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

    @staticmethod
    def complete_in(directory: Path) -> list[Path]:
        """The complete checkpoints (with ``state.pt``) under ``directory``, oldest first: warm-start
        ones (``sft_k``) before RL ones (``step_n``), each by number (``checkpoint_order``)."""
        if not directory.is_dir():
            return []
        found = [
            (o, p)
            for p in directory.iterdir()
            if (o := checkpoint_order(p)) is not None and (p / STATE).is_file()
        ]
        return [p for _, p in sorted(found)]

    @classmethod
    def latest_in(cls, directory: Path) -> Path | None:
        """The latest complete checkpoint under ``directory`` (``complete_in``'s last), or None."""
        found = cls.complete_in(directory)
        return found[-1] if found else None

    def latest_checkpoint(self) -> Path | None:
        """The run's latest complete checkpoint directory, or None."""
        return self.latest_in(self.checkpoints_dir)

    def entries(self) -> tuple[list[str], list[str]]:
        """The names in the directory, sorted, as (what agentrl wrote: ``OWNED`` names and their
        leftover temporary files; everything else). ``config.yaml``, the user's, and the lock file
        are in neither.
        Two empty lists when the directory does not exist."""
        if not self.path.is_dir():
            return [], []
        ours, foreign = [], []
        for p in sorted(self.path.iterdir()):
            m = _TMP.match(p.name)
            if p.name in OWNED or (m is not None and m.group(1) in OWNED):
                ours.append(p.name)
            elif p.name not in (CONFIG_YAML, LOCK):
                foreign.append(p.name)
        return ours, foreign

    def clear(self) -> list[str]:
        """Delete what agentrl wrote here (``entries()[0]``); ``ConfigError`` naming them when the
        directory holds anything else, and then nothing is deleted. Returns the names deleted."""
        import shutil

        ours, foreign = self.entries()
        if foreign:
            raise ConfigError(
                f"{self.path} holds files agentrl did not write ({_names(foreign)}): not deleting it"
            )
        for name in ours:
            p = self.path / name
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
        return ours

    def forget_after(self, step: int) -> None:
        """Delete the trajectories, per-token files, evaluations and audits of the steps after
        ``step``, and the temporary files of interrupted writes (a resumed run recomputes those steps)."""
        for folder in (TRAJECTORIES, TOKENS, EVAL, AUDIT):
            d = self.path / folder
            if not d.is_dir():
                continue
            for p in d.iterdir():
                s = step_number(p)
                if (s is not None and s > step) or _TMP.match(p.name):
                    p.unlink()

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
            state = torch.load(latest / STATE, map_location="cpu", weights_only=False, mmap=True)
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
        return write_json(self.summary_file, summary)

    def append_metrics(self, row: dict[str, Any]) -> None:
        """Append one step's metrics to ``metrics.jsonl`` (flushed when this returns)."""
        with open(self.metrics_file, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")

    def rewrite_metrics(self, rows: list[dict[str, Any]]) -> None:
        """Replace ``metrics.jsonl`` with ``rows`` (a resumed run forgets the steps it recomputes)."""
        _replace(self.metrics_file, "".join(json.dumps(r) + "\n" for r in rows).encode())

    def rewrite_sft(self, rows: list[dict[str, Any]]) -> None:
        """Replace ``sft.jsonl`` with ``rows`` (a run resumed inside its warm start)."""
        _replace(self.sft_file, "".join(json.dumps(r) + "\n" for r in rows).encode())

    def append_sft(self, row: dict[str, Any]) -> None:
        with open(self.sft_file, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")

    def write_token_stats(self, step: int, stats: dict[str, dict[str, np.ndarray]]) -> Path:
        return write_token_stats(self.token_file(step), stats)


def _names(names: list[str], most: int = 4) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def write_token_stats(path: Path | str, stats: dict[str, dict[str, np.ndarray]]) -> Path:
    """Write per-token numbers atomically to one ``.npz``: per trajectory id, ``positions`` (int64
    [n], its policy tokens' indices in the expander's row) and float32 [n] arrays (log-probs,
    values, scores, rewards, advantages, returns). The rows are concatenated, with an ``offsets``
    array and the ids as JSON; a field absent from some row reads back as NaN there."""
    path = Path(path)
    ids = list(stats)
    fields = sorted({f for e in stats.values() for f in e if f != "positions"})
    lengths = [len(stats[t]["positions"]) for t in ids]
    arrays: dict[str, np.ndarray] = {
        "ids": np.frombuffer(json.dumps(ids).encode(), dtype=np.uint8),
        "offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        "positions": np.concatenate([stats[t]["positions"] for t in ids] or [np.zeros(0, np.int64)]),
    }
    for f in fields:
        arrays[f] = np.concatenate(
            [stats[t].get(f, np.full(n, np.nan, np.float32)) for t, n in zip(ids, lengths, strict=True)]
            or [np.zeros(0, np.float32)]
        ).astype(np.float32)
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    _replace(path, buf.getvalue())
    return path


def read_token_stats(path: Path | str) -> dict[str, dict[str, np.ndarray]]:
    """The inverse of ``write_token_stats``: per trajectory id, ``positions`` (int64 [n]) and the
    stored float32 [n] arrays."""
    with np.load(Path(path)) as z:
        ids = json.loads(z["ids"].tobytes().decode())
        offsets = z["offsets"]
        data = {k: z[k] for k in z.files if k not in ("ids", "offsets")}
    out: dict[str, dict[str, np.ndarray]] = {}
    for i, tid in enumerate(ids):
        a, b = int(offsets[i]), int(offsets[i + 1])
        out[tid] = {k: v[a:b] for k, v in data.items()}
    return out
