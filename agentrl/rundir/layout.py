"""What agentrl writes in a run directory: the names of its files, ``LAYOUT`` (every path as a
pattern, the one rule of what agentrl wrote), and the rules built on it — which entries of a
directory are the run's, what ``--overwrite`` deletes, what a resume forgets.

Standard library only (and ``agentrl.errors``).
"""

from __future__ import annotations

import re
from pathlib import Path

from agentrl.errors import ConfigError

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
#: The files a tokenizer's ``save_pretrained`` writes (transformers' names for them; a tokenizer
#: that writes another makes ``--overwrite`` refuse, naming it, rather than delete a user's file).
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "chat_template.jinja", "chat_template.json", "additional_chat_templates/*", "vocab.json",
    "vocab.txt", "merges.txt", "tokenizer.model", "spiece.model", "sentencepiece.bpe.model",
    "*.tiktoken",
)  # fmt: skip
#: Every file agentrl writes in a run directory, relative to it: ``{n}`` is a step number, ``{ckpt}``
#: a checkpoint's name (``step_{n}`` or ``sft_{n}``), ``*`` one name, ``**`` anything below. The one
#: rule of what ``--overwrite`` may delete (``RunDir.entries``); ``config.yaml`` is the user's.
LAYOUT = (
    CONFIG, METRICS, SFT, SUMMARY, REWARD_CURVE, REPORT, SAMPLING,
    *(f"{TOKENIZER}/{name}" for name in TOKENIZER_FILES),
    f"{TENSORBOARD}/events.out.tfevents.*",  # TensorBoard's event files
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
#: The temporary file of an atomic write (``atomic.write_atomic``, ``write_trajectories``):
#: ``.NAME.tmp-PID``.
TMP = re.compile(r"^\.(.+)\.tmp-\d+$")


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
    if (m := TMP.match(name)) is not None:
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


def entries(run: Path) -> tuple[list[str], list[str]]:
    """What the run directory ``run`` holds, sorted, as (the names at its top that ``LAYOUT``
    lists, or the temporary files of their writes; the paths, relative to it, of everything
    anywhere in the tree that ``LAYOUT`` does not list — a folder it does not list named once, for
    all it holds). ``config.yaml`` (the user's) and the lock file at the top are in neither.
    Symbolic links are judged by their names, never followed. Two empty lists when the directory
    does not exist."""
    if not run.is_dir():
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

    walk(run, "")
    return ours, foreign


def clear(run: Path) -> list[str]:
    """Delete what agentrl wrote in the run directory ``run`` (``entries(run)[0]``);
    ``ConfigError`` naming the paths of anything else, anywhere in the tree (``entries(run)[1]``),
    and then nothing is deleted. Returns the names deleted."""
    import shutil

    ours, foreign = entries(run)
    if foreign:
        raise ConfigError(f"{run} holds files agentrl did not write ({_names(foreign)}): not deleting it")
    for name in ours:
        p = run / name
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()
    return ours


def forget_after(run: Path, step: int) -> None:
    """Delete the trajectories, per-token files, evaluations and audits of the steps after
    ``step`` in the run directory ``run``, and the temporary files of interrupted writes (a resumed
    run recomputes those steps); only files ``LAYOUT`` lists."""
    for folder in (TRAJECTORIES, TOKENS, EVAL, AUDIT):
        d = run / folder
        if not d.is_dir():
            continue
        for p in d.iterdir():
            s = step_number(p)
            later = (s is not None and s > step) or TMP.match(p.name)
            if later and in_layout(f"{folder}/{p.name}"):  # never a file of the user's
                p.unlink()


def _names(names: list[str], most: int = 4) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")
