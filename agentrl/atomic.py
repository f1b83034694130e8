"""The one atomic write of a durable file: a temporary file beside the target, its bytes flushed to
the disk (fsync), then a rename, so a reader sees the old file or the new one, never half of one,
and a crash after the rename cannot leave the new name pointing at unwritten blocks.

The temporary file is ``.NAME.tmp-PID`` (``agentrl.rundir.layout`` counts it as the file itself, and
``agentrl train --overwrite`` removes it). Every durable file agentrl writes whole goes through
``write_atomic``: a run's JSON files, metrics and token statistics (``agentrl.rundir``), a trajectory
file (``agentrl.trajectory.write_trajectories``), a rollout's ``OUT.params.json``, replay's tensors and
the HTML report. (Appended files — a trajectory store, ``metrics.jsonl`` during a run — are written
a line at a time and repaired at their tail instead.)
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

__all__ = ["temporary_name", "write_atomic"]


def temporary_name(path: Path) -> Path:
    """The temporary file an atomic write of ``path`` by this process goes through."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def write_atomic(path: str | os.PathLike[str], data: bytes | Iterable[bytes]) -> Path:
    """Write ``data`` (bytes, or chunks of bytes written in turn) to ``path`` atomically: the parent
    directory made, a temporary file beside ``path`` written, flushed and fsynced, then renamed over
    ``path``. The temporary file is removed when writing fails. Returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(path)
    try:
        with open(tmp, "wb") as f:
            for chunk in [data] if isinstance(data, bytes | bytearray) else data:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path
