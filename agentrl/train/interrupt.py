"""A run stopped from outside (Ctrl-C, SIGTERM from a scheduler or ``kill``) ends like a failed one:
its ``finally`` blocks run, and it leaves a summary and curve marked interrupted.

Python turns Ctrl-C into ``KeyboardInterrupt`` wherever the main thread is. SIGTERM's default kills
the process at once; ``raise_on_sigterm`` makes it a request instead: the run stops at the next
*stop point* (``check_stop``, after each warm-start and RL step), where nothing is half done, by
raising ``RunInterrupted``; the request is acknowledged on stderr at once. A second SIGTERM does
not wait: it raises at once, like Ctrl-C. (An exception raised from a signal handler lands at
whatever bytecode runs, in the middle of an event loop's set-up or a thread pool's shutdown, say; a
stop point never does.) ``restore_sigterm`` undoes it. A SIGKILL or the OOM killer cannot be
caught: the checkpoints are what survive those.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from typing import Any

from agentrl.errors import RunInterrupted

__all__ = [
    "ACKNOWLEDGE",
    "RunInterrupted",
    "check_stop",
    "raise_on_sigterm",
    "restore_sigterm",
    "stop_requested",
]

_UNSET = object()
_REQUESTED = threading.Event()


ACKNOWLEDGE = "agentrl: SIGTERM received: stopping after the current step (send it again to stop now)"


def _on_sigterm(signum: int, frame: Any) -> None:
    if _REQUESTED.is_set():  # asked twice: stop now
        raise RunInterrupted("", signal="SIGTERM")
    _REQUESTED.set()
    # Said at once: a step can take seconds to minutes, and a silent wait reads as a hung run.
    with contextlib.suppress(Exception):  # a closed or broken stderr must not turn the request into a crash
        print(ACKNOWLEDGE, file=sys.stderr, flush=True)


def stop_requested() -> bool:
    """Whether a SIGTERM asked the run to stop."""
    return _REQUESTED.is_set()


def check_stop(requested: bool | None = None) -> None:
    """A stop point: raise ``RunInterrupted`` if a SIGTERM asked to stop. ``requested``: the
    decision when the caller made it (all ranks of a distributed run must agree on it)."""
    if stop_requested() if requested is None else requested:
        raise RunInterrupted("", signal="SIGTERM")


def raise_on_sigterm() -> Any:
    """Make SIGTERM ask for a stop (main thread only); returns what ``restore_sigterm`` needs."""
    if threading.current_thread() is not threading.main_thread():
        return _UNSET
    _REQUESTED.clear()
    return signal.signal(signal.SIGTERM, _on_sigterm)


def restore_sigterm(previous: Any) -> None:
    """Put back the SIGTERM handler ``raise_on_sigterm`` replaced."""
    if previous is not _UNSET and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
        _REQUESTED.clear()
