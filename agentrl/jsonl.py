"""Reading JSONL files line by line in bounded memory: the one reader of every JSONL file agentrl reads.

What every reader must agree on has one owner here:

- a line is read only up to ``MAX_LINE_BYTES``; a longer one (``/dev/zero``, a file that is not
  JSONL) is an error naming ``file:line``, never gigabytes of memory, and a file is never read whole;
- blank lines are skipped;
- a last line without its newline that does not parse is a torn write (a crash mid-write): it is
  skipped with a ``TornLineWarning`` (``torn_note`` words it), which the CLI prints as one
  ``note:`` line. A last line that parses only lost its newline and is read.

Before an append-only JSONL file (a trajectory store, ``metrics.jsonl``) is appended to again,
``mend_tail`` makes it end on a whole line: a torn last line is cut, a whole one that lost its newline
gets it back (the one repair; each writer says what a whole line is).

And what every writer must agree on: ``dumps`` is the one JSON encoder of what agentrl writes
(trajectories, ``--json`` outputs, ``summary.json``, ``metrics.jsonl``). It is strict JSON: a NaN or
an infinity is not a JSON number (Python's ``json`` would write ``NaN``/``Infinity``, which other
readers refuse), so it raises ``ValueError`` naming where the number sits. Records whose numbers may
honestly be undefined (a step's metrics: a gradient norm that overflowed) pass through
``finite_or_null`` first, which writes such a number as ``null``.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from agentrl.errors import AgentRLError, ConfigError, TornLineWarning

__all__ = [
    "MAX_LINE_BYTES",
    "dumps",
    "finite_or_null",
    "input_file",
    "iter_lines",
    "line_text",
    "mend_tail",
    "read_records",
    "torn_note",
]

#: The longest JSONL line agentrl reads (a trajectory with 50 MB of tool output fits).
MAX_LINE_BYTES = 64 * 1024 * 1024

T = TypeVar("T")


def torn_note(path: str | os.PathLike[str], lineno: int, size: int, action: str = "skipped") -> str:
    """The words of every torn-line note: ``<path>:<line>: skipped a torn last line (N bytes, no newline)``."""
    return f"{path}:{lineno}: {action} a torn last line ({size} bytes, no newline)"


def mend_tail(path: str | os.PathLike[str], whole: Callable[[bytes], bool]) -> tuple[int, int]:
    """Make the append-only file ``path`` end on a whole line before more is appended: a last line
    without its newline that ``whole`` refuses (a write cut short; or longer than ``MAX_LINE_BYTES``)
    is cut off, one that ``whole`` accepts only lost its newline and gets it back; the file is then
    fsynced. Reads the last line only. Returns (where the last line starts, the bytes cut: 0 when
    none); (0, 0) for a missing or empty file or one that ends on a newline."""
    path = Path(path)
    if not path.is_file():
        return 0, 0
    with open(path, "r+b") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return 0, 0
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return 0, 0
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
        tail = f.read(MAX_LINE_BYTES + 1)
        cut = 0
        if len(tail) <= MAX_LINE_BYTES and whole(tail):
            f.seek(0, os.SEEK_END)
            f.write(b"\n")
        else:
            f.truncate(start)
            cut = size - start
        f.flush()
        os.fsync(f.fileno())
        return start, cut


def input_file(path: str | os.PathLike[str], what: str = "trajectory file") -> Path:
    """``path`` as an input to read: a ``ConfigError`` when it does not exist or is a directory.
    Anything else is read as it comes (a pipe such as ``<(zcat x.jsonl.gz)`` too), a line at a time."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"{p}: no such {what}")
    if p.is_dir():
        raise ConfigError(f"{p}: is a directory, not a {what}")
    return p


def iter_lines(
    path: str | os.PathLike[str],
    *,
    error: type[AgentRLError] = ConfigError,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> Iterator[tuple[int, bytes, bool]]:
    """``(line number, line without its newline, whether it had one)`` for each line of ``path``,
    holding one line at a time. A line over ``max_line_bytes`` raises ``error`` naming ``path:line``."""
    with open(path, "rb") as f:
        lineno = 0
        while line := f.readline(max_line_bytes + 1):
            lineno += 1
            ended = line.endswith(b"\n")
            if not ended and len(line) > max_line_bytes:
                raise error(
                    f"{path}:{lineno}: a line longer than {max_line_bytes / 2**20:g} MiB, the most a JSONL "
                    "line may hold (is this a JSONL file?)"
                )
            yield lineno, (line[:-1] if ended else line), ended


def line_text(
    line: bytes, path: str | os.PathLike[str], lineno: int, error: type[AgentRLError] = ConfigError
) -> str:
    """A line as text: JSONL is UTF-8 (``json.loads`` on bytes would guess UTF-16 or UTF-32 from
    zero bytes instead); anything else raises ``error`` naming ``path:line`` and the byte."""
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{path}:{lineno}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def read_records(
    path: str | os.PathLike[str],
    parse: Callable[[bytes, int], T],
    *,
    error: type[AgentRLError] = ConfigError,
    not_torn: tuple[type[AgentRLError], ...] = (),
) -> Iterator[T]:
    """``parse(line, line_number)`` of each non-blank line of ``path``, in order, in bounded memory.

    ``parse`` raises ``error`` (naming ``path:line``) for a bad line. On the last line, when it has
    no newline, that error means a torn write: the line is skipped with a ``TornLineWarning``,
    unless the error is one of ``not_torn`` (a whole record of an unknown schema, say). A line too
    long raises ``error``."""
    for lineno, line, ended in iter_lines(path, error=error):
        if not line.strip():
            continue
        if ended:
            yield parse(line, lineno)
            continue
        try:
            record = parse(line, lineno)
        except not_torn:
            raise
        except error:
            warnings.warn(torn_note(path, lineno, len(line)), TornLineWarning, stacklevel=3)
            return
        yield record


def _non_finite(obj: Any, path: str) -> str | None:
    """Where the first float of ``obj`` that is not finite sits (``reward.normalized``, ``rows[3]``)."""
    if isinstance(obj, float):
        return None if math.isfinite(obj) else path or "<root>"
    if isinstance(obj, dict):
        items: Any = ((f"{path}.{k}" if path else str(k), v) for k, v in obj.items())
    elif isinstance(obj, list | tuple):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(obj))
    else:
        return None
    return next((where for p, v in items if (where := _non_finite(v, p)) is not None), None)


def dumps(obj: Any, **kwargs: Any) -> str:
    """``json.dumps(obj, **kwargs)`` as strict JSON (``allow_nan=False``): a float that is not finite
    raises ``ValueError`` naming its place in ``obj`` (``reward.normalized: nan is not a JSON number``)."""
    try:
        return json.dumps(obj, allow_nan=False, **kwargs)
    except ValueError:
        where = _non_finite(obj, "")
        if where is None:
            raise
        raise ValueError(f"{where}: a number that is not finite (NaN or infinity) is not JSON") from None


def finite_or_null(obj: Any) -> Any:
    """``obj`` with every float that is not finite replaced by None (written ``null``), in dicts and
    lists at any depth; for records such as metrics, where such a number means "no value"."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_or_null(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite_or_null(v) for v in obj]
    return obj
