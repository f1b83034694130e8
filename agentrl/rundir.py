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

Only the standard library and numpy are imported at module level; torch and yaml only by the
functions that need them.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.errors import AgentRLWarning, ConfigError, TornLineWarning
from agentrl.jsonl import line_text, read_records

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
    "in_layout",
    "mend_jsonl_tail",
    "read_jsonl",
    "read_token_stats",
    "sft_name",
    "step_name",
    "step_number",
    "write_checkpoint_manifest",
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
#: Inside one checkpoint directory ``checkpoints/step_NNNNN/``.
STATE = "state.pt"
META = "meta.json"
#: The size and sha256 of each of the checkpoint's other files (``write_checkpoint_manifest``).
MANIFEST = "manifest.json"
SHARDED = "sharded"
#: Every file agentrl writes in a run directory, relative to it: ``{n}`` is a step number, ``{ckpt}``
#: a checkpoint's name (``step_{n}`` or ``sft_{n}``), ``*`` one name, ``**`` anything below. The one
#: rule of what ``--overwrite`` may delete (``RunDir.entries``); ``config.yaml`` is the user's.
LAYOUT = (
    CONFIG, METRICS, SFT, SUMMARY, REWARD_CURVE, REPORT, SAMPLING,
    f"{TOKENIZER}/*",  # the tokenizer's save_pretrained files
    f"{TENSORBOARD}/*",  # TensorBoard's event files
    f"{VLLM_SYNC}/**",  # the weights a vLLM server reloads (save_pretrained; lora-stepNNNNN/ adapters)
    f"{TRAJECTORIES}/step_{{n}}.jsonl", f"{TOKENS}/step_{{n}}.npz", f"{EVAL}/step_{{n}}.jsonl",
    f"{AUDIT}/step_{{n}}.jsonl",
    *(f"{CHECKPOINTS}/{{ckpt}}/{name}" for name in (STATE, META, MANIFEST, f"{SHARDED}/**")),
    f"{CHECKPOINTS}/.{{ckpt}}.tmp/**",  # a checkpoint being written, or cut short by a kill
)  # fmt: skip
#: The names at the top of a run directory that ``LAYOUT`` lists.
OWNED = frozenset(p.split("/")[0] for p in LAYOUT)

_STEP = re.compile(r"step_(\d+)$")
_CHECKPOINT = re.compile(r"(sft|step)_(\d+)$")
# The temporary file of an atomic write (``_replace``, ``write_trajectories``): ``.NAME.tmp-PID``.
_TMP = re.compile(r"^\.(.+)\.tmp-\d+$")


def _pattern(glob: str) -> str:
    """A ``LAYOUT`` pattern as a regular expression."""
    parts = re.split(r"(\*\*|\*|\{n\}|\{ckpt\})", glob)
    tokens = {"**": ".+", "*": "[^/]+", "{n}": r"\d+", "{ckpt}": r"(?:step|sft)_\d+"}
    return "".join(tokens.get(p, re.escape(p)) for p in parts)


def _folders(glob: str) -> list[str]:
    """The folders a ``LAYOUT`` pattern's files lie in (``**``: any folder below too)."""
    parts = glob.split("/")
    found = ["/".join(parts[:i]) for i in range(1, len(parts))]
    return [*found, glob] if parts[-1] == "**" else found


_LAYOUT_FILE = re.compile("|".join(_pattern(g) for g in LAYOUT))
_LAYOUT_DIR = re.compile("|".join(dict.fromkeys(_pattern(d) for g in LAYOUT for d in _folders(g))))


def in_layout(relpath: str, *, folder: bool = False) -> bool:
    """Whether ``LAYOUT`` lists ``relpath`` (POSIX, relative to the run directory) as a file, or
    with ``folder`` as a folder; the leftover temporary file of an atomic write (``.NAME.tmp-PID``)
    counts as the file ``NAME`` beside it."""
    if folder:
        return _LAYOUT_DIR.fullmatch(relpath) is not None
    parent, _, name = relpath.rpartition("/")
    if (m := _TMP.match(name)) is not None:
        relpath = f"{parent}/{m.group(1)}" if parent else m.group(1)
    return _LAYOUT_FILE.fullmatch(relpath) is not None


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


def _digest(path: Path) -> tuple[int, str]:
    """(size, sha256) of the file at ``path``, read a block at a time."""
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
            size += len(block)
    return size, h.hexdigest()


def write_checkpoint_manifest(directory: Path) -> Path:
    """Record the size and sha256 of every file of the checkpoint in ``directory`` (``state.pt``,
    ``meta.json``, FSDP shards) in its ``manifest.json``, written atomically once they are all
    written; ``checkpoint_damage`` checks them before the checkpoint is trusted."""
    files: dict[str, dict[str, Any]] = {}
    for p in sorted(directory.rglob("*")):
        if p.is_file() and p.name != MANIFEST:
            size, sha = _digest(p)
            files[p.relative_to(directory).as_posix()] = {"size": size, "sha256": sha}
    return write_json(directory / MANIFEST, {"files": files})


def checkpoint_damage(directory: Path) -> str | None:
    """Why the checkpoint in ``directory`` cannot be trusted, as ``FILE: reason``; None when it can.
    With a manifest (``write_checkpoint_manifest``): a file it lists is missing, or its size or
    sha256 differs (a full disk, a copy cut short, a file overwritten). A checkpoint written before
    manifests existed is loaded instead (memory-mapped: the weights are not read): a load error is
    the damage."""
    manifest = directory / MANIFEST
    if not manifest.is_file():
        return _unloadable(directory / STATE)
    try:
        files = json.loads(manifest.read_text(encoding="utf-8"))["files"]
        listed = {str(k): (int(v["size"]), str(v["sha256"])) for k, v in files.items()}
    except (ValueError, KeyError, TypeError, AttributeError) as e:  # JSON, UTF-8, shape
        return f"{manifest}: not a checkpoint manifest ({type(e).__name__}: {e})"
    if STATE not in listed:
        return f"{manifest}: does not list {STATE}"
    for name, (size, sha) in listed.items():
        p = directory / name
        if not p.is_file():
            return f"{p}: missing (the manifest lists it)"
        if (found := p.stat().st_size) != size:
            return f"{p}: {found} bytes, where {size} were written"
        if _digest(p)[1] != sha:
            return f"{p}: its sha256 is not the one recorded when it was written"
    return None


def _unloadable(state: Path) -> str | None:
    """Why torch cannot load the ``state.pt`` of a checkpoint without a manifest (None: it can)."""
    import zipfile

    if not zipfile.is_zipfile(state):  # torch.save's archive; its own error would blame mmap
        return f"{state}: not a torch checkpoint archive (cut short or overwritten)"
    import torch

    try:
        data = torch.load(state, map_location="cpu", weights_only=False, mmap=True)
    except Exception as e:  # a damaged archive: PytorchStreamReader, UnpicklingError, EOFError ...
        return f"{state}: cannot be loaded ({type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]})"
    return None if isinstance(data, dict) and "step" in data else f"{state}: not an agentrl checkpoint"


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

    def resume_checkpoint(self) -> Path | None:
        """The checkpoint ``--resume`` goes on from: the latest complete one that is intact
        (``checkpoint_damage``), each newer damaged one named in a warning; None when the run has
        no complete checkpoint. ``ConfigError`` naming the file when every one is damaged, or when
        the run's logs do not cover the one found (``check_logs``)."""
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
                return ckpt
            damaged.append(why)
        if not damaged:
            return None
        more = f" (and the {len(damaged) - 1} before it)" if len(damaged) > 1 else ""
        raise ConfigError(
            f"--resume: no intact checkpoint to go on from: {damaged[0]}{more}; start over with --overwrite"
        )

    def check_logs(self, checkpoint: Path) -> None:
        """``ConfigError`` unless the run's logs hold every step ``checkpoint`` comes after:
        ``metrics.jsonl`` a row for each RL step 1…n of ``step_n``, ``sft.jsonl`` one for each
        warm-start step 1…k of ``sft_k`` (the trainer logs a step before it checkpoints it). A
        resume without them would end with a summary and a curve of the later steps alone."""
        kind, n = checkpoint_order(checkpoint) or (1, 0)
        file, key = (self.metrics_file, "step") if kind == 1 else (self.sft_file, "sft/step")
        if n == 0:
            return
        name = checkpoint.relative_to(self.path) if checkpoint.is_relative_to(self.path) else checkpoint
        if not file.is_file():
            raise ConfigError(
                f"--resume: {file} is missing, and {name} comes after step {n}: the run's files disagree; "
                f"put the run's {file.name} back, or start over with --overwrite"
            )
        with warnings.catch_warnings():  # a torn last line: noted once, when the trainer reads it
            warnings.simplefilter("ignore", TornLineWarning)
            rows = read_jsonl(file)
        logged = {int(r[key]) for r in rows if isinstance(r.get(key), int | float)}
        missing = [s for s in range(1, n + 1) if s not in logged]
        if missing:
            raise ConfigError(
                f"--resume: {file} lacks steps {_spans(missing)}, and {name} comes after step {n}: the "
                f"run's files disagree; put the run's {file.name} back, or start over with --overwrite"
            )

    def entries(self) -> tuple[list[str], list[str]]:
        """What the directory holds, sorted, as (the names at its top that ``LAYOUT`` lists, or the
        temporary files of their writes; the paths, relative to it, of everything anywhere in the
        tree that ``LAYOUT`` does not list — a folder it does not list named once, for all it holds).
        ``config.yaml`` (the user's) and the lock file at the top are in neither. Symbolic links are
        judged by their names, never followed. Two empty lists when the directory does not exist."""
        if not self.path.is_dir():
            return [], []
        ours: list[str] = []
        foreign: list[str] = []

        def walk(folder: Path, prefix: str) -> None:
            for p in sorted(folder.iterdir()):
                rel = prefix + p.name
                if not prefix and p.name in (CONFIG_YAML, LOCK):
                    continue
                is_folder = p.is_dir() and not p.is_symlink()
                if not in_layout(rel, folder=is_folder):
                    foreign.append(rel)  # a folder: named once, not looked into
                    continue
                if is_folder:
                    walk(p, rel + "/")
                if not prefix:
                    ours.append(p.name)

        walk(self.path, "")
        return ours, foreign

    def clear(self) -> list[str]:
        """Delete what agentrl wrote here (``entries()[0]``); ``ConfigError`` naming the paths of
        anything else, anywhere in the tree (``entries()[1]``), and then nothing is deleted. Returns
        the names deleted."""
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
        ``step``, and the temporary files of interrupted writes (a resumed run recomputes those
        steps); only files ``LAYOUT`` lists."""
        for folder in (TRAJECTORIES, TOKENS, EVAL, AUDIT):
            d = self.path / folder
            if not d.is_dir():
                continue
            for p in d.iterdir():
                s = step_number(p)
                later = (s is not None and s > step) or _TMP.match(p.name)
                if later and in_layout(f"{folder}/{p.name}"):  # never a file of the user's
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


def _spans(steps: list[int]) -> str:
    """``1-3, 7``: sorted step numbers as runs."""
    spans: list[list[int]] = []
    for s in steps:
        if spans and s == spans[-1][1] + 1:
            spans[-1][1] = s
        else:
            spans.append([s, s])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in spans)


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
