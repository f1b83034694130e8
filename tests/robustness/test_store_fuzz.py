"""Fuzzing the trajectory reader and writer: whatever follows or replaces part of a file, every
record before the damage is returned; a bad line is a ``TrajectoryFormatError`` naming file:line;
a torn last line is skipped with ``TornLineWarning``; a writer reopening the file loses nothing."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrl.errors import TrajectoryFormatError
from agentrl.trajectory import (
    FunctionCall,
    Message,
    RewardBreakdown,
    ToolCall,
    TornLineWarning,
    Trajectory,
    TrajectoryStore,
    read_trajectories,
)

FUZZ = settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _traj(i: int) -> Trajectory:
    calls = [ToolCall(id=f"c{i}", function=FunctionCall(name="search", arguments='{"query": "q ü\\n"}'))]
    return Trajectory(
        id=f"task-{i}#0",
        task_id=f"task-{i}",
        messages=[
            Message(role="user", content=f'question {i} — ünïcode, "quotes", a newline\nand a tab\t'),
            Message(
                role="assistant",
                content=None,
                tool_calls=calls,
                token_ids=[1, 2, i],
                logprobs=[-0.1, -0.2, -0.3],
            ),
            Message(role="tool", tool_call_id=f"c{i}", content="result " * i),
            Message(role="assistant", content=f"report {i} \\cite{{x}}"),
        ],
        reward=RewardBreakdown(total=float(i) / 2)
        if i % 3
        else RewardBreakdown(total=None, status="judge_error"),
        info={"i": i, "nested": {"a": [1, 2, {"b": None}]}},
    )


RECORDS = [_traj(i) for i in range(6)]
LINES = [t.to_json().encode("utf-8") + b"\n" for t in RECORDS]


def _read(path: Path) -> tuple[list[Trajectory], TrajectoryFormatError | None, list[str]]:
    """(records yielded before any error, the error, torn-line warnings)."""
    got: list[Trajectory] = []
    err = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            for t in read_trajectories(path):
                got.append(t)
        except TrajectoryFormatError as e:
            err = e
    torn = [str(w.message) for w in caught if issubclass(w.category, TornLineWarning)]
    return got, err, torn


def _line_of(err: TrajectoryFormatError, path: Path) -> int:
    m = re.match(rf"^{re.escape(str(path))}:(\d+): ", str(err))
    assert m, f"the error does not name {path}:LINE: {err}"
    return int(m.group(1))


@pytest.fixture
def path(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("store") / "trajectories.jsonl"


@FUZZ
@given(st.integers(0, len(RECORDS)), st.binary(max_size=200))
def test_bytes_appended_after_valid_records_never_lose_them(path, n, junk):
    path.write_bytes(b"".join(LINES[:n]) + junk)
    got, err, torn = _read(path)
    assert [t.to_json() for t in got[:n]] == [t.to_json() for t in RECORDS[:n]]
    if err is not None:
        assert _line_of(err, path) > n  # the damage is after the valid records
        assert len(got) >= n
    elif junk.strip() and not junk.endswith(b"\n") and len(got) == n:
        assert torn  # an unreadable unterminated tail was skipped, and said so


@FUZZ
@given(st.integers(0, len(RECORDS) - 1), st.data())
def test_a_corrupted_line_is_an_error_at_that_line_after_every_earlier_record(path, k, data):
    line = LINES[k][:-1]
    i = data.draw(st.integers(0, len(line)))
    j = data.draw(st.integers(i, min(len(line), i + 20)))
    patch = data.draw(st.binary(max_size=8).filter(lambda b: b"\n" not in b))
    bad = line[:i] + patch + line[j:]
    path.write_bytes(b"".join(LINES[:k]) + bad + b"\n" + b"".join(LINES[k + 1 :]))
    got, err, _ = _read(path)
    assert [t.to_json() for t in got[:k]] == [t.to_json() for t in RECORDS[:k]]
    if err is not None:
        assert _line_of(err, path) == k + 1 and len(got) == k
    else:  # the patch left a valid record (e.g. inside a string): nothing else changed
        assert len(got) == len(RECORDS)
        assert [t.id for t in got[k + 1 :]] == [t.id for t in RECORDS[k + 1 :]]


@FUZZ
@given(st.integers(0, sum(map(len, LINES))))
def test_a_kill_mid_write_then_a_writer_reopening_the_file_loses_only_the_torn_record(path, cut):
    whole = b"".join(LINES)
    path.write_bytes(whole[:cut])
    complete = whole[:cut].count(b"\n")
    got, err, torn = _read(path)
    assert err is None
    # a record cut just before its newline is complete and is kept
    assert len(got) in (complete, complete + 1)
    assert [t.to_json() for t in got] == [t.to_json() for t in RECORDS[: len(got)]]
    assert bool(torn) == (len(got) == complete and cut not in (0, *_ends()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TornLineWarning)
        with TrajectoryStore(path) as store:
            store.extend(RECORDS[len(got) :])
    got2, err2, torn2 = _read(path)
    assert err2 is None and not torn2
    assert [t.to_json() for t in got2] == [t.to_json() for t in RECORDS]  # exactly once each


def _ends() -> list[int]:
    out, pos = [], 0
    for line in LINES:
        pos += len(line)
        out.append(pos)
    return out


@pytest.mark.parametrize("opener", [b"[", b'{"a":'])
def test_deeply_nested_json_is_a_format_error_not_a_recursion_error(path, opener):
    """Regression: json.loads raised RecursionError (not ValueError) out of the reader."""
    path.write_bytes(LINES[0] + opener * 100_000 + b"\n" + LINES[1])
    got, err, _ = _read(path)
    assert [t.id for t in got] == [RECORDS[0].id] and err is not None and _line_of(err, path) == 2
    path.write_bytes(LINES[0] + opener * 100_000)  # as a torn last line it is skipped
    got, err, torn = _read(path)
    assert [t.id for t in got] == [RECORDS[0].id] and err is None and torn


def test_a_stored_answer_call_with_deeply_nested_arguments_does_not_crash_the_judge():
    """Regression: ``final_report`` let json's RecursionError out, and the judge's whole batch failed."""
    import asyncio

    from agentrl.judge import Judge, JudgeConfig, parse_rubric

    call = ToolCall(id="a", function=FunctionCall(name="answer", arguments="[" * 100_000))
    # The broken answer call is no report (the env answers it with an argument error); the next turn is.
    traj = Trajectory(
        id="deep",
        task_id="t",
        messages=[
            Message(role="assistant", content="calling", tool_calls=[call]),
            Message(role="assistant", content="Q1 revenue"),
        ],
    )
    assert traj.final_report() == "Q1 revenue"
    rubric = parse_rubric(
        {
            "id": "r",
            "criteria": [
                {"id": "q1", "text": "Says Q1.", "weight": 1.0, "grader": {"type": "regex", "pattern": "Q1"}}
            ],
        }
    )
    (reward,) = asyncio.run(Judge(JudgeConfig()).score_many([(traj, rubric)]))
    assert reward.status == "ok" and reward.total == 1.0
