"""A counted phase (``agentrl rollout``'s episodes) shows its count in a log as it goes: a line at
every tenth of the total and at least every 30 s, where a rich bar printed nothing until the end."""

from __future__ import annotations

import io

import agentrl.train.progress as progress_module
from agentrl.train.progress import LineProgress, Progress


def test_a_line_at_every_tenth_of_the_items(monkeypatch):
    monkeypatch.setattr(progress_module._LineCounter, "QUIET_S", 0.0)
    out = io.StringIO()
    with LineProgress(out).counted("rollout") as bar:
        bar.total(66)
        for _ in range(66):
            bar.advance("reward 0.500")
    lines = out.getvalue().splitlines()
    assert lines[-1].startswith("rollout: 66 done in ")
    counts = [int(line.split()[1].split("/")[0]) for line in lines[:-1]]
    assert counts == [1, 7, 14, 20, 27, 33, 40, 47, 53, 60, 66]  # the first, then every tenth
    assert all(" · reward 0.500 (" in line for line in lines[:-1])


def test_a_line_every_30_s_when_items_are_slow(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(progress_module.time, "perf_counter", lambda: clock[0])
    out = io.StringIO()
    with LineProgress(out).counted("rollout") as bar:  # no total known: every 30 s only
        for _ in range(5):
            clock[0] += 20.0
            bar.advance()
    # nothing in the first 2 s; then the first item after them, and one every 30 s
    assert out.getvalue().splitlines() == [
        "rollout 1 (20.0 s)",
        "rollout 3 (60.0 s)",
        "rollout 5 (100.0 s)",
        "rollout: 5 done in 100.0 s",
    ]


def test_a_short_phase_prints_nothing():
    out = io.StringIO()
    with LineProgress(out).counted("judge") as bar:
        bar.total(6)
        for _ in range(6):
            bar.advance()
    assert out.getvalue() == ""


def test_no_progress_shows_nothing():
    with Progress().counted("rollout") as bar:
        bar.total(3)
        bar.advance("x")


def test_agentrl_judge_counts_what_it_grades(monkeypatch, capsys, tmp_path):
    """``agentrl judge`` over a file: its count in a log (an LLM judge over thousands of trajectories
    takes minutes), every trajectory counted once."""
    from pathlib import Path

    from agentrl.cli import main

    root = Path(__file__).resolve().parents[2]
    monkeypatch.setattr(progress_module._LineCounter, "QUIET_S", 0.0)
    src = root / "examples" / "trajectories" / "alphabet-oracle.jsonl"
    rubric = root / "rubrics" / "alphabet-2025-q1-cloud-offline.yaml"
    assert main(["judge", str(src), "--rubric", str(rubric), "--out", str(tmp_path / "j.jsonl")]) == 0
    err = capsys.readouterr().err.splitlines()
    counts = [line.split()[1] for line in err if line.startswith("judge ") and "/" in line.split()[1]]
    assert counts == [f"{k}/6" for k in range(1, 7)] and "judge: 6 done in " in "\n".join(err)
