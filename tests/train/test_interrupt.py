"""SIGTERM asks a run to stop at its next stop point; a second SIGTERM stops it at once."""

from __future__ import annotations

import os
import signal

import pytest

from agentrl.errors import RunInterrupted
from agentrl.train.interrupt import ACKNOWLEDGE, check_stop, raise_on_sigterm, restore_sigterm, stop_requested


def test_sigterm_is_a_request_until_it_comes_twice(capsys):
    before = signal.getsignal(signal.SIGTERM)
    previous = raise_on_sigterm()
    try:
        check_stop()  # nothing asked yet
        os.kill(os.getpid(), signal.SIGTERM)  # handled in this (main) thread: no exception here
        assert stop_requested()
        assert capsys.readouterr().err == ACKNOWLEDGE + "\n"  # said at once, not when the step ends
        with pytest.raises(RunInterrupted) as e:
            check_stop()
        assert e.value.signal == "SIGTERM"
        check_stop(False)  # the caller's (all ranks') decision wins
        with pytest.raises(RunInterrupted):
            os.kill(os.getpid(), signal.SIGTERM)  # the second one raises where the program is
            signal.sigtimedwait([], 0) if hasattr(signal, "sigtimedwait") else None
    finally:
        restore_sigterm(previous)
    assert not stop_requested() and signal.getsignal(signal.SIGTERM) == before
