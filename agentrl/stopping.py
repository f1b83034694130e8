"""Stopping from outside (Ctrl-C, SIGTERM from a scheduler or ``kill``): one flag, the stop points that
read it, and the signal handlers that set it.

A long phase — a sampling call, an episode's turns, an update's micro-batches, an evaluation —
calls ``stop_point()`` at places where leaving loses nothing that was promised: between decoded
tokens, turns and micro-batches. There, once a stop was asked for, it raises ``RunInterrupted``,
so a command ends within a second of the signal whatever phase it is in, instead of when the
phase ends (an RL step, an evaluation, a SmolLM2 rollout: seconds to minutes). What a phase had
not finished is discarded, as after a crash: what is on disk is what the last checkpoint, the
append-only trajectory files and the metrics written so far hold, and ``--resume`` goes on from
there exactly as after ``kill -9``.

``stops_on_signals()`` installs the handlers for a command (main thread only; elsewhere, and
where nothing is installed, ``stop_point`` never raises):

- **Ctrl-C (SIGINT)** raises ``KeyboardInterrupt`` in the main thread at once, as Python's own
  handler does, and sets the flag, so that worker threads (the env's tool threads, a sampling
  thread) stop at their next stop point instead of finishing their work before the process can
  exit.
- **SIGTERM** sets the flag, says so on stderr at once, and the next stop point raises. Where no
  stop point comes within ``GRACE_S`` (a phase without them: a tokenizer, a report's rendering), it
  raises in the main thread wherever that is, as Ctrl-C would; so does a second SIGTERM.

A thread that waits on a call which may block for long (a web tool, an LLM judge on a server that
answers late) runs it with ``in_background`` and waits with ``wait``: the wait is a stop point every
0.1 s, and the call's daemon thread, left blocked in its socket, does not hold the process's exit.

``inner=False`` keeps the flag but makes ``stop_point`` a no-op: a process of a distributed run
must stop where every rank stops (between steps, agreed by a collective: ``agentrl.train``), or a
rank that left would leave the others waiting in a collective for it.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from agentrl.errors import RunInterrupted

__all__ = [
    "ACKNOWLEDGE",
    "ACKNOWLEDGE_BETWEEN_STEPS",
    "RunInterrupted",
    "check_stop",
    "in_background",
    "request_stop",
    "stop_point",
    "stop_requested",
    "stops_on_signals",
    "wait",
]

T = TypeVar("T")

ACKNOWLEDGE = "agentrl: SIGTERM received: stopping within a second (send it again to stop now)"
ACKNOWLEDGE_BETWEEN_STEPS = (
    "agentrl: SIGTERM received: stopping after the current step, where every rank stops "
    "(send it again to stop now)"
)

_REQUESTED = threading.Event()
_INNER = threading.Event()  # set while stop points inside a phase may raise
_SIGNAL = ["SIGTERM"]  # the signal that asked (read by the stop point that raises)
_DEPTH = [0]  # how many stops_on_signals blocks the main thread is in
_HONOURED = threading.Event()  # a stop point raised: the stop is under way (its clean-up must not be cut)
_ENDING = threading.Event()  # a block is putting its handlers back
_LOCK = threading.Lock()  # held while a grace timer signals, and while a block puts its handlers back
_TIMERS: list[threading.Timer] = []  # the grace timers of this block's SIGTERMs (cancelled when it ends)

#: Seconds a SIGTERM waits for a stop point before it stops the main thread wherever it is (a phase
#: without stop points: a report's rendering, a tokenizer, a checkpoint's files).
GRACE_S = 0.5


class _StoppedTasks(logging.Filter):
    """Drops asyncio's "Task exception was never retrieved" for a task that a stop ended: the
    stop's exception left the event loop through ``asyncio.run`` (it was not lost) and the command
    says once that it was interrupted."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], KeyboardInterrupt))


logging.getLogger("asyncio").addFilter(_StoppedTasks())


def request_stop(sig: str = "SIGTERM") -> None:
    """Ask every stop point to stop (what the handlers do; a test or an embedding program may too)."""
    _SIGNAL[0] = sig
    _REQUESTED.set()


def stop_requested() -> bool:
    """Whether a signal asked this process to stop."""
    return _REQUESTED.is_set()


def stop_point() -> None:
    """A place where a phase may end: raises ``RunInterrupted`` once a stop was asked for, where the
    handlers of ``stops_on_signals`` are installed with ``inner`` (the default)."""
    if _REQUESTED.is_set() and _INNER.is_set():
        _HONOURED.set()  # the grace timer stands down: the clean-up that follows must not be cut
        raise RunInterrupted("", signal=_SIGNAL[0])


def check_stop(requested: bool | None = None) -> None:
    """A stop point every process of a run reaches at the same place (between steps), where a
    distributed run stops too: raises ``RunInterrupted`` if a stop was asked for. ``requested``: the
    decision when the caller made it (all ranks of a distributed run must agree on it)."""
    if stop_requested() if requested is None else requested:
        _HONOURED.set()
        raise RunInterrupted("", signal=_SIGNAL[0])


#: Seconds between the stop points of ``wait``.
WAIT_SLICE_S = 0.1


def in_background(
    fn: Callable[..., T], *args: Any, name: str = "agentrl-call", **kwargs: Any
) -> cf.Future[T]:
    """``fn(*args, **kwargs)`` on a daemon thread of its own, as a future (wait on it with ``wait``).
    Unlike a ``ThreadPoolExecutor``'s thread, which the interpreter joins at exit, a call left blocked
    in I/O after a stop (a web server that answers in a minute) does not keep the process alive."""
    future: cf.Future[T] = cf.Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as e:  # handed to the waiting thread, which raises it
            future.set_exception(e)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future


def wait(future: cf.Future[T], timeout: float | None = None) -> T:
    """``future.result(timeout)`` with a stop point every ``WAIT_SLICE_S``: a thread waiting on a call
    that may block for long leaves at a stop instead of when the call returns. Raises
    ``concurrent.futures.TimeoutError`` once ``timeout`` seconds passed, and what the call raised."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        stop_point()
        left = WAIT_SLICE_S if deadline is None else min(WAIT_SLICE_S, deadline - time.monotonic())
        if left <= 0 and not future.done():
            raise cf.TimeoutError
        try:
            return future.result(timeout=max(left, 0.0))
        except cf.TimeoutError:
            if future.done():  # the call itself raised a TimeoutError (a socket's): it is the call's
                raise


def _set_inner(inner: bool) -> None:
    if inner:
        _INNER.set()
    else:
        _INNER.clear()


def _say(line: str) -> None:
    with contextlib.suppress(Exception):  # a closed or broken stderr must not turn the request into a crash
        print(line, file=sys.stderr, flush=True)


def _on_sigterm(signum: int, frame: Any) -> None:
    if _ENDING.is_set():  # the block is putting its handlers back: the command is ending anyway
        return
    if _REQUESTED.is_set() and _SIGNAL[0] == "SIGTERM":  # asked twice: stop now
        raise RunInterrupted("", signal="SIGTERM")
    request_stop("SIGTERM")
    # Said at once: a silent wait reads as a hung process.
    _say(ACKNOWLEDGE if _INNER.is_set() else ACKNOWLEDGE_BETWEEN_STEPS)
    if _INNER.is_set():
        timer = threading.Timer(GRACE_S, _overdue)
        timer.daemon = True
        _TIMERS.append(timer)
        timer.start()


def _overdue() -> None:
    """No stop point was reached within ``GRACE_S``: a second SIGTERM to the main thread, whose
    handler raises wherever that thread is. A real signal, not ``_thread.interrupt_main``: it also
    wakes a main thread blocked in a system call (an event loop waiting for an HTTP reply). Under
    ``_LOCK``, so that the block's handlers are never put back between the check and the signal
    (Python's default SIGTERM would end the process without its summary)."""
    with _LOCK:
        if _REQUESTED.is_set() and not (_HONOURED.is_set() or _ENDING.is_set()) and _INNER.is_set():
            signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)  # type: ignore[arg-type]


def _on_sigint(signum: int, frame: Any) -> None:
    request_stop("SIGINT")
    raise KeyboardInterrupt


@contextlib.contextmanager
def stops_on_signals(inner: bool = True) -> Iterator[None]:
    """Within the block, Ctrl-C and SIGTERM stop this process at its next stop point (see the module);
    the handlers it replaced are put back when it ends, and the flag cleared when the outermost
    block ends (a block inside another — the trainer's inside the CLI's — keeps a stop asked for
    before it began, and sets ``inner`` for its own extent only). In a thread other than the main
    one it does nothing (Python runs handlers in the main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if not _DEPTH[0]:
        _REQUESTED.clear()
        _HONOURED.clear()
    _DEPTH[0] += 1
    was_inner = _INNER.is_set()
    _set_inner(inner)
    previous = signal.signal(signal.SIGTERM, _on_sigterm), signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        _ENDING.set()  # a grace timer or a late SIGTERM must not raise inside the restore below
        with _LOCK:  # a grace timer firing now has signalled before the handlers go, or does not
            _restore(previous, was_inner)


def _restore(previous: tuple[Any, Any], was_inner: bool) -> None:
    """The end of a ``stops_on_signals`` block: its handlers put back, the outermost one's state cleared."""
    for sig, handler in zip((signal.SIGTERM, signal.SIGINT), previous, strict=True):
        signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
    _set_inner(was_inner)
    _DEPTH[0] -= 1
    if not _DEPTH[0]:
        for timer in _TIMERS:  # a later block's stop is not this one's
            timer.cancel()
        _TIMERS.clear()
        _REQUESTED.clear()
        _HONOURED.clear()
    _ENDING.clear()
