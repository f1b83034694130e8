"""A counted phase (``agentrl rollout``'s episodes) shows its count in a log as it goes: a line at
every tenth of the total and at least every 30 s, where a rich bar printed nothing until the end."""

from __future__ import annotations

import io

import agentrl.train.progress as progress_module
from agentrl.train.progress import LineProgress, Progress


def test_a_line_at_every_tenth_of_the_items():
    out = io.StringIO()
    with LineProgress(out).counted("rollout") as bar:
        bar.total(66)
        for _ in range(66):
            bar.advance("reward 0.500")
    lines = out.getvalue().splitlines()
    assert lines[0] == "rollout ..." and lines[-1].startswith("rollout: 66 done in ")
    counts = [int(line.split()[1].split("/")[0]) for line in lines[1:-1]]
    assert counts == [7, 14, 20, 27, 33, 40, 47, 53, 60, 66]
    assert all(" · reward 0.500 (" in line for line in lines[1:-1])


def test_a_line_every_30_s_when_items_are_slow(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(progress_module.time, "perf_counter", lambda: clock[0])
    out = io.StringIO()
    with LineProgress(out).counted("rollout") as bar:  # no total known: every 30 s only
        for _ in range(5):
            clock[0] += 20.0
            bar.advance()
    assert out.getvalue().splitlines()[1:-1] == ["rollout 2 (40.0 s)", "rollout 4 (80.0 s)"]


def test_no_progress_shows_nothing():
    with Progress().counted("rollout") as bar:
        bar.total(3)
        bar.advance("x")
