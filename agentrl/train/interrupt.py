"""A run stopped from outside (Ctrl-C, SIGTERM from a scheduler or ``kill``) ends like a failed one:
its ``finally`` blocks run, and it leaves a summary and curve marked interrupted.

Python turns Ctrl-C into ``KeyboardInterrupt``, but SIGTERM's default kills the process at once;
``raise_on_sigterm`` makes SIGTERM raise ``RunInterrupted`` in the main thread instead (elsewhere
it changes nothing: only the main thread may set handlers), and ``restore_sigterm`` undoes it. A
SIGKILL or the OOM killer cannot be caught: the checkpoints are what survive those.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

from agentrl.errors import RunInterrupted

__all__ = ["RunInterrupted", "raise_on_sigterm", "restore_sigterm"]

_UNSET = object()


def _raise(signum: int, frame: Any) -> None:
    raise RunInterrupted("", signal="SIGTERM")


def raise_on_sigterm() -> Any:
    """Make SIGTERM raise ``RunInterrupted`` (main thread only); returns what ``restore_sigterm`` needs."""
    if threading.current_thread() is not threading.main_thread():
        return _UNSET
    return signal.signal(signal.SIGTERM, _raise)


def restore_sigterm(previous: Any) -> None:
    """Put back the SIGTERM handler ``raise_on_sigterm`` replaced."""
    if previous is not _UNSET and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
