"""Ctrl-C and SIGTERM stop a command within a second (``agentrl.stopping``): stop points raise once a
stop was asked for, a SIGTERM that meets none raises where the main thread is after ``GRACE_S``,
a second SIGTERM raises at once, and a distributed run's processes stop only where all agree."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import logging
import os
import signal
import threading
import time

import pytest

from agentrl import stopping
from agentrl.stopping import (
    ACKNOWLEDGE,
    ACKNOWLEDGE_BETWEEN_STEPS,
    RunInterrupted,
    check_stop,
    in_background,
    request_stop,
    stop_point,
    stop_requested,
    stops_on_signals,
    wait,
)


def _handlers():
    return signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)


def test_a_sigterm_is_said_at_once_and_raised_at_the_next_stop_point(capsys):
    before = _handlers()
    with stops_on_signals():
        stop_point()  # nothing asked yet
        check_stop()
        os.kill(os.getpid(), signal.SIGTERM)  # handled in this (main) thread: no exception here
        assert stop_requested()
        assert capsys.readouterr().err == ACKNOWLEDGE + "\n"  # said at once
        with pytest.raises(RunInterrupted) as e:
            stop_point()
        assert e.value.signal == "SIGTERM"
        check_stop(False)  # the caller's (all ranks') decision wins
    assert not stop_requested() and _handlers() == before


def test_a_second_sigterm_raises_where_the_program_is():
    with stops_on_signals(), pytest.raises(RunInterrupted) as e:
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)  # raised by the handler, here
        time.sleep(5)  # never reached
    assert e.value.signal == "SIGTERM"


def test_a_sigterm_that_meets_no_stop_point_raises_after_the_grace():
    with stops_on_signals(), pytest.raises(RunInterrupted) as e:
        t0 = time.monotonic()
        os.kill(os.getpid(), signal.SIGTERM)
        while time.monotonic() - t0 < 10:  # busy, no stop point
            sum(range(100))
    waited = time.monotonic() - t0
    assert e.value.signal == "SIGTERM" and stopping.GRACE_S <= waited < stopping.GRACE_S + 2


def test_no_grace_raise_once_a_stop_point_took_the_stop():
    """The clean-up after a stop (a summary, a curve) is never cut by the grace timer."""
    with stops_on_signals():
        os.kill(os.getpid(), signal.SIGTERM)
        with pytest.raises(RunInterrupted):
            stop_point()
        t0 = time.monotonic()
        while time.monotonic() - t0 < stopping.GRACE_S + 0.5:  # the clean-up, longer than the grace
            sum(range(100))


def test_ctrl_c_raises_at_once_and_stops_the_other_threads_at_their_stop_points():
    with stops_on_signals():
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        assert stop_requested()  # worker threads' stop points see it

        async def worker():  # a thread's stop point raises too
            return await asyncio.to_thread(stop_point)

        with pytest.raises(RunInterrupted) as e:
            asyncio.run(worker())
        assert e.value.signal == "SIGINT"


def test_between_steps_only_where_ranks_must_agree(capsys):
    with stops_on_signals(inner=False):
        os.kill(os.getpid(), signal.SIGTERM)
        assert capsys.readouterr().err == ACKNOWLEDGE_BETWEEN_STEPS + "\n"
        time.sleep(stopping.GRACE_S + 0.3)  # no grace raise either
        stop_point()  # inside a step: goes on
        with pytest.raises(RunInterrupted):
            check_stop()  # between steps: stops


def test_a_block_inside_another_keeps_the_request_and_sets_inner_for_its_extent():
    with stops_on_signals():
        request_stop()
        with stops_on_signals(inner=False):
            assert stop_requested()  # asked before the inner block began: kept
            stop_point()  # the inner block's processes agree between steps
        with pytest.raises(RunInterrupted):
            stop_point()  # the outer block's rule again
    assert not stop_requested()
    stop_point()  # no handlers installed: never raises


def test_asyncio_does_not_log_a_task_that_a_stop_ended(caplog):
    record = logging.LogRecord(
        "asyncio", logging.ERROR, __file__, 1, "Task exception was never retrieved", None, None
    )
    record.exc_info = (RunInterrupted, RunInterrupted(""), None)
    assert not logging.getLogger("asyncio").filter(record)
    record.exc_info = (ValueError, ValueError("x"), None)
    assert logging.getLogger("asyncio").filter(record)  # a real failure is still logged


def test_a_grace_timer_never_reaches_into_a_later_block():
    with stops_on_signals():
        os.kill(os.getpid(), signal.SIGTERM)  # its grace timer starts; the block ends before it fires
    with stops_on_signals():
        request_stop()  # asked without a signal: no grace of its own
        t0 = time.monotonic()
        while time.monotonic() - t0 < stopping.GRACE_S + 0.5:  # the first block's timer would fire here
            sum(range(100))


def test_the_grace_wakes_a_main_thread_blocked_in_a_system_call():
    """An event loop waiting for an HTTP reply sits in a system call: the grace is a real signal to
    the main thread, which wakes it (``_thread.interrupt_main`` only raised when the call returned:
    59 s for a server that answered after 60)."""
    with stops_on_signals(), pytest.raises(RunInterrupted):
        t0 = time.monotonic()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(20)  # one blocking call
    assert time.monotonic() - t0 < stopping.GRACE_S + 2


def test_a_wait_on_a_blocked_call_is_a_stop_point_and_its_thread_holds_no_exit():
    """A thread waiting on a call blocked in I/O (a web tool, a late judge) leaves at a stop; the call's
    thread is a daemon, which the interpreter's exit does not join."""
    with stops_on_signals():
        fut = in_background(time.sleep, 30, name="agentrl-test-call")
        (call,) = [t for t in threading.enumerate() if t.name == "agentrl-test-call"]
        assert call.daemon
        threading.Timer(0.2, request_stop).start()
        t0 = time.monotonic()
        with pytest.raises(RunInterrupted):
            wait(fut)
        assert time.monotonic() - t0 < 0.2 + 3 * stopping.WAIT_SLICE_S + 0.3


def test_a_wait_times_out_and_passes_on_what_the_call_returned_or_raised():
    t0 = time.monotonic()
    with pytest.raises(cf.TimeoutError):
        wait(in_background(time.sleep, 5), timeout=0.25)
    assert 0.25 <= time.monotonic() - t0 < 1.0
    assert wait(in_background(lambda a, b=0: a + b, 2, b=3), timeout=5) == 5

    def socket_timeout():
        raise TimeoutError("the socket timed out")

    with pytest.raises(TimeoutError, match="socket"):  # the call's own TimeoutError, not the wait's
        wait(in_background(socket_timeout), timeout=5)
    with pytest.raises(ValueError, match="bad"):
        wait(in_background(int, "bad"))
