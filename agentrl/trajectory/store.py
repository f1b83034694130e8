"""The append-only JSONL trajectory store: one trajectory a line, flushed and fsynced per line.

A crash can tear at most the line being written. Readers skip a torn last line with a warning;
a writer that reopens the file cuts the torn tail off first, so the next record starts on a line
of its own. A bad line anywhere else is an error that names the file and line.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from pydantic import ValidationError

from agentrl.atomic import write_atomic
from agentrl.errors import SchemaVersionError, TornLineWarning, TrajectoryFormatError
from agentrl.jsonl import line_text, mend_tail, read_records, torn_note
from agentrl.trajectory.models import Trajectory

__all__ = ["TornLineWarning", "TrajectoryStore", "read_trajectories", "write_trajectories"]


#: Pydantic's errors for a number out of its field's range, or not finite.
_NUMBER_ERRORS = frozenset({"finite_number", "less_than_equal", "greater_than_equal"})


def _parse(line: bytes, path: Path, lineno: int) -> Trajectory:
    text = line_text(line, path, lineno, TrajectoryFormatError)
    try:
        return Trajectory.from_json(text)
    except SchemaVersionError as e:
        raise SchemaVersionError(f"{path}:{lineno}: {e}") from None
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "<root>"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] in _NUMBER_ERRORS:  # a reward's number: say which (nan, inf, 5.0)
            msg += f" (got {err['input']!r})"
        raise TrajectoryFormatError(f"{path}:{lineno}: {loc}: {msg}") from None
    except (ValueError, RecursionError) as e:  # JSONDecodeError; nesting too deep
        raise TrajectoryFormatError(f"{path}:{lineno}: not a valid trajectory line: {e}") from None


def read_trajectories(path: str | os.PathLike[str]) -> Iterator[Trajectory]:
    """Yield the trajectories of a JSONL file in order, one line in memory at a time.

    A last line without its newline that does not parse is a torn write: it is skipped with a
    ``TornLineWarning`` (one of an unknown schema version is reported). Any other bad line, or a line over ``agentrl.jsonl.MAX_LINE_BYTES``,
    raises ``TrajectoryFormatError`` naming ``path:line``.
    """
    path = Path(path)
    yield from read_records(
        path,
        lambda line, lineno: _parse(line, path, lineno),
        error=TrajectoryFormatError,
        not_torn=(SchemaVersionError,),
    )


def write_trajectories(path: str | os.PathLike[str], trajectories: Iterable[Trajectory]) -> int:
    """Write ``trajectories`` to ``path`` atomically (temporary file, fsync, rename). Returns the count."""
    n = 0

    def lines() -> Iterator[bytes]:
        nonlocal n
        for t in trajectories:
            yield t.to_json().encode("utf-8") + b"\n"
            n += 1

    write_atomic(path, lines())
    return n


def _is_trajectory(line: bytes) -> bool:
    try:
        Trajectory.from_json(line)
    except Exception:
        return False
    return True


def _count_lines(f: BinaryIO, end: int) -> int:
    """Newlines in the first ``end`` bytes of ``f``, read in blocks."""
    f.seek(0)
    n = 0
    while end > 0:
        chunk = f.read(min(end, 1 << 20))
        if not chunk:
            break
        n += chunk.count(b"\n")
        end -= len(chunk)
    return n


class TrajectoryStore:
    """An append-only JSONL file of trajectories, safe to append to from several threads.

    >>> with TrajectoryStore("runs/demo/trajectories.jsonl") as store:   # doctest: +SKIP
    ...     store.append(traj)
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self._lock = threading.Lock()
        self._file = None

    # The file is opened lazily so that constructing a store for reading creates nothing.
    def _open(self):
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._repair_tail()
            self._file = open(self.path, "ab")  # noqa: SIM115 - kept open across appends, closed in close()
        return self._file

    def _repair_tail(self) -> None:
        """A torn last line (a write cut short) is removed with a ``TornLineWarning`` before appending;
        a whole trajectory that only lost its newline gets it back (``agentrl.jsonl.mend_tail``)."""
        start, cut = mend_tail(self.path, _is_trajectory)
        if cut:
            with open(self.path, "rb") as f:
                lineno = _count_lines(f, start) + 1
            warnings.warn(
                torn_note(self.path, lineno, cut, "removed") + " before appending",
                TornLineWarning,
                stacklevel=3,
            )

    def append(self, trajectory: Trajectory) -> None:
        """Append one trajectory as one line, then flush and (by default) fsync."""
        line = trajectory.to_json().encode("utf-8") + b"\n"
        with self._lock:
            f = self._open()
            f.write(line)
            f.flush()
            if self.fsync:
                os.fsync(f.fileno())

    def extend(self, trajectories: Iterable[Trajectory]) -> None:
        """Append several trajectories, each flushed and fsynced as it is written."""
        for t in trajectories:
            self.append(t)

    def __iter__(self) -> Iterator[Trajectory]:
        if not self.path.exists():
            return iter(())
        return read_trajectories(self.path)

    def read(self) -> list[Trajectory]:
        """All trajectories in the file (an empty list when it does not exist yet)."""
        return list(self)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> TrajectoryStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
