"""One writer per output: an exclusive lock on a run directory or a rollout's output file.

Two ``agentrl train --resume`` into one ``output_dir`` (or two ``agentrl rollout`` into one
``--out``) would both append, and the run would hold steps ``7, 8, 8, 9, 9``. The writer holds a
lock file for its whole life: ``RUN_DIR/.agentrl.lock`` (``agentrl.rundir.LOCK``) or ``.OUT.lock``
beside an output file, locked with ``flock``. The kernel drops the lock when the process ends, in
any way (an exception, Ctrl-C, SIGKILL, the OOM killer), so a lock left by a dead process is never
in the way; the file records the holder (pid, host, command, start time) so that a refusal names it
in one line. A normal exit removes the file.

Where the file system has no ``flock`` (some network mounts), the recorded pid and host decide: a
holder on this host whose pid is gone is stale and taken over; one on another host is refused, with
the file to delete if that run is gone. Only the standard library is imported.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from agentrl.errors import ConfigError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: the pid/host record alone decides
    fcntl = None  # type: ignore[assignment]

__all__ = ["LockHeld", "OutputLock", "file_lock_path", "holder_of", "lock_output", "refuse_if_held"]

_NO_FLOCK = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


class LockHeld(ConfigError):
    """Another live process writes this output; the message names it."""


def file_lock_path(out: str | os.PathLike[str]) -> Path:
    """The lock file of an output file: ``.NAME.lock`` beside it."""
    p = Path(out)
    return p.with_name(f".{p.name}.lock")


def _command() -> str:
    """This process's command line as a user typed it (``agentrl train c.yaml --resume``), cut short."""
    if not sys.argv:
        return "python"
    first = Path(sys.argv[0])
    name = first.parent.name if first.name == "__main__.py" else first.name  # python -m agentrl
    name = "python -c" if sys.argv[0] == "-c" else name
    return " ".join([name, *sys.argv[1:]])[:200]


def _me() -> dict[str, Any]:
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": _command(),
    }


def _read(fd: int) -> dict[str, Any]:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        data = json.loads(os.read(fd, 4096).decode("utf-8", "replace") or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def _describe(holder: dict[str, Any]) -> str:
    if not holder:
        return "another process"
    command = f"`{holder['command']}` " if holder.get("command") else ""
    since = f", since {holder['started']}" if holder.get("started") else ""
    return f"{command}(pid {holder.get('pid', '?')} on {holder.get('host', '?')}{since})"


class OutputLock:
    """A held lock (``lock_output``); ``release()`` (or leaving the ``with`` block) removes the file
    and frees it. ``created`` lists the directories the lock had to create, deepest first."""

    def __init__(self, path: Path, fd: int | None, created: list[Path]) -> None:
        self.path, self._fd, self.created = path, fd, created

    def release(self) -> None:
        """Remove the lock file while still holding it (a process waiting on the old file then sees
        it is gone and tries again), then close it, and remove the directories it created if they
        are still empty (a refused or failed start leaves nothing behind). Idempotent."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            if _same_file(self._fd, self.path):
                self.path.unlink()
        os.close(self._fd)
        self._fd = None
        for d in self.created:
            try:
                d.rmdir()
            except OSError:  # not empty (the run's files), or gone
                break

    def __enter__(self) -> OutputLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _same_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _mkdirs(directory: Path) -> list[Path]:
    made: list[Path] = []
    d = directory
    while not d.exists() and d != d.parent:
        made.append(d)
        d = d.parent
    directory.mkdir(parents=True, exist_ok=True)
    return made


def lock_output(lock_file: str | os.PathLike[str], *, what: str) -> OutputLock:
    """Take the lock ``lock_file`` for this process, creating its directory if needed; ``LockHeld``
    naming ``what`` (``output_dir runs/x``, ``--out runs/x.jsonl``) and the holder when another live
    process has it. Nothing is written when refused."""
    path = Path(lock_file)
    created = _mkdirs(path.parent)
    for _ in range(16):  # the holder may remove the file between our open and our lock: open again
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            locked = _locked(fd, path, what)
        except BaseException:
            os.close(fd)
            raise
        if not locked:
            os.close(fd)
            continue
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, json.dumps(_me()).encode())
        return OutputLock(path, fd, created)
    raise LockHeld(f"{what}: its lock file {path} keeps changing under us; is another run starting there?")


def _locked(fd: int, path: Path, what: str) -> bool:
    """Lock ``fd`` (the file at ``path``): True when held, False when ``path`` no longer names it
    (retry); ``LockHeld`` when a live process holds it. The caller closes ``fd`` unless True."""
    flocked = fcntl is not None
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _held(what, _read(fd), path) from None
        except OSError as e:
            if e.errno not in _NO_FLOCK:
                raise
            flocked = False
    if not _same_file(fd, path):  # removed (released) by its last holder after we opened it
        return False
    if not flocked:  # no flock here: the record decides
        holder = _read(fd)
        if holder and holder.get("pid") != os.getpid():
            other_host = holder.get("host") != socket.gethostname()
            if other_host or _alive(holder.get("pid")):
                raise _held(what, holder, path, no_flock=other_host)
    return True


def _held(what: str, holder: dict[str, Any], path: Path, *, no_flock: bool = False) -> LockHeld:
    if no_flock:
        return LockHeld(
            f"{what} is in use by {_describe(holder)}, on another host of a file system without locks: "
            f"if that run is gone, delete {path}"
        )
    return LockHeld(
        f"{what} is in use by {_describe(holder)}: one writer at a time (two would mix their lines); "
        "wait for it to finish, stop it, or choose another output"
    )


def holder_of(lock_file: str | os.PathLike[str]) -> dict[str, Any] | None:
    """Who holds ``lock_file`` now (its record), or None when nobody does; takes no lock that outlives
    the call and creates nothing."""
    path = Path(lock_file)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return _read(fd) or {"pid": "?"}
            except OSError:
                pass
            else:
                fcntl.flock(fd, fcntl.LOCK_UN)
                return None
        holder = _read(fd)
        live = holder and (holder.get("host") != socket.gethostname() or _alive(holder.get("pid")))
        return holder if live else None
    finally:
        os.close(fd)


def refuse_if_held(lock_file: str | os.PathLike[str], *, what: str) -> None:
    """``LockHeld`` when another process holds ``lock_file`` (a quick check before a run is built)."""
    holder = holder_of(lock_file)
    if holder is not None and holder.get("pid") != os.getpid():
        raise _held(what, holder, Path(lock_file))
