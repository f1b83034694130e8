"""A run's checkpoints: finding the complete ones (``state.pt`` present) in order, the ``state.pt``
a path names, and verifying one before it is trusted — ``manifest.json``, written after the
checkpoint's other files, records each one's size and sha256 (``write_checkpoint_manifest``);
``checkpoint_damage`` checks them.

torch is imported only by the functions that load a ``state.pt``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from agentrl.rundir.atomic import write_json
from agentrl.rundir.layout import CHECKPOINTS, MANIFEST, STATE, checkpoint_order


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


def latest_in(directory: Path) -> Path | None:
    """The latest complete checkpoint under ``directory`` (``complete_in``'s last), or None."""
    found = complete_in(directory)
    return found[-1] if found else None


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
        latest = latest_in(d)
        if latest is not None:
            return latest / STATE
    return None


def run_of_checkpoint(state_file: str | Path) -> Path:
    """The run directory holding the checkpoint whose state file is ``state_file``
    (``RUN/checkpoints/step_NNNNN/state.pt``, as ``checkpoint_state_file`` returns it)."""
    return Path(state_file).parent.parent.parent


def file_digest(path: Path) -> tuple[int, str]:
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
            size, sha = file_digest(p)
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
        if file_digest(p)[1] != sha:
            return f"{p}: its sha256 is not the one recorded when it was written"
    return None


def load_error(e: BaseException) -> str:
    """A failed ``torch.load`` as one short line: the exception's type and its first line (torch's
    own messages run to many lines, and may blame mmap or the zip format for a file cut short)."""
    return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}"


def _unloadable(state: Path) -> str | None:
    """Why torch cannot load the ``state.pt`` of a checkpoint without a manifest (None: it can)."""
    import zipfile

    if not zipfile.is_zipfile(state):  # torch.save's archive; its own error would blame mmap
        return f"{state}: not a torch checkpoint archive (cut short or overwritten)"
    import torch

    try:
        data = torch.load(state, map_location="cpu", weights_only=False, mmap=True)
    except Exception as e:  # a damaged archive: PytorchStreamReader, UnpicklingError, EOFError ...
        return f"{state}: cannot be loaded ({load_error(e)})"
    return None if isinstance(data, dict) and "step" in data else f"{state}: not an agentrl checkpoint"
