"""The trajectory model and the append-only JSONL store."""

import json
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrl.errors import SchemaVersionError, TrajectoryFormatError
from agentrl.trajectory import (
    CriterionScore,
    FunctionCall,
    Message,
    RewardBreakdown,
    ToolCall,
    TornLineWarning,
    Trajectory,
    TrajectoryStore,
    read_trajectories,
    write_trajectories,
)

# Any Unicode text (lone surrogates included: they are escaped, still valid JSON).
text = st.text(max_size=40)
finite = st.floats(allow_nan=False, allow_infinity=False)
json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | finite | text
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)


@st.composite
def messages(draw):
    role = draw(st.sampled_from(["system", "user", "assistant", "tool"]))
    kw = {"role": role, "content": draw(st.none() | text)}
    if role == "assistant":
        if draw(st.booleans()):
            n = draw(st.integers(0, 6))
            kw["token_ids"] = draw(st.lists(st.integers(0, 200_000), min_size=n, max_size=n))
            if draw(st.booleans()):
                kw["logprobs"] = draw(
                    st.lists(
                        st.floats(max_value=0, allow_nan=False, allow_infinity=False), min_size=n, max_size=n
                    )
                )
            kw["finish_reason"] = draw(st.sampled_from(["stop", "length", "tool_calls"]))
        if draw(st.booleans()):
            kw["tool_calls"] = [
                ToolCall(
                    id=draw(text),
                    function=FunctionCall(name=draw(text), arguments=json.dumps({"q": draw(text)})),
                )
            ]
        kw["reasoning_content"] = draw(st.none() | text)
    if role == "tool":
        kw["tool_call_id"] = draw(text)
    return Message(**kw)


@st.composite
def rewards(draw):
    if draw(st.booleans()):
        return None
    crit = [
        CriterionScore(
            id=draw(text),
            verdict=draw(st.sampled_from(["Fully Satisfied", "Partially Satisfied", "Not Satisfied", None])),
            score=draw(st.floats(0, 1)),  # what a verdict mapping gives
            weight=draw(st.floats(-1e6, 1e6)),
            kind=draw(st.sampled_from(["positive", "negative"])),
            reasoning=draw(st.none() | text),
        )
        for _ in range(draw(st.integers(0, 3)))
    ]
    if draw(st.booleans()):
        return RewardBreakdown(total=None, status="judge_error", criteria=crit, error=draw(text))
    low = sum(min(c.weight, 0.0) for c in crit)
    high = sum(max(c.weight, 0.0) for c in crit)
    total = draw(st.floats(low, high) if crit else finite)  # a total its criteria allow
    return RewardBreakdown(
        total=total,
        normalized=draw(st.none() | st.floats(0, 1)),
        criteria=crit,
        rubric_hash=draw(st.none() | text),
        cost_usd=draw(finite),
    )


@st.composite
def trajectories(draw):
    return Trajectory(
        id=draw(text),
        task_id=draw(text),
        messages=draw(st.lists(messages(), max_size=5)),
        reward=draw(rewards()),
        info=draw(st.dictionaries(text, json_values, max_size=4)),
    )


@settings(max_examples=200, deadline=None)
@given(trajectories())
def test_round_trip_is_byte_exact(t):
    line = t.to_json()
    assert "\n" not in line
    again = Trajectory.from_json(line)
    assert again == t
    assert again.to_json() == line


def test_a_non_finite_number_is_not_written_as_json():
    """Trajectories are strict JSON: ``-Infinity`` is no JSON number, so writing one is an error that
    names the trajectory and the field (the policies never store a non-finite log-prob)."""
    t = Trajectory(
        id="a",
        task_id="t",
        messages=[Message(role="assistant", content="x", token_ids=[1, 2], logprobs=[float("-inf"), -0.5])],
    )
    with pytest.raises(ValueError, match=r"trajectory 'a': messages\[0\]\.logprobs\[0\]: .*not finite"):
        t.to_json()
    t.messages[0].logprobs = [-1.0, -0.5]
    t.info["elapsed_s"] = float("nan")
    with pytest.raises(ValueError, match=r"info\.elapsed_s"):
        t.to_json()


def test_extra_openai_message_fields_are_kept():
    line = json.dumps(
        {
            "id": "a",
            "task_id": "t",
            "messages": [{"role": "assistant", "content": "hi", "refusal": None, "annotations": [{"x": 1}]}],
            "reward": None,
            "info": {},
            "schema_version": 1,
        }
    )
    t = Trajectory.from_json(line)
    assert t.messages[0].model_extra["annotations"] == [{"x": 1}]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"role": "tool", "content": "x", "token_ids": [1]}, "assistant messages only"),
        ({"role": "assistant", "content": "x", "token_ids": [1, 2], "logprobs": [-1.0]}, "logprobs has 1"),
        ({"role": "assistant", "content": "x", "logprobs": [-1.0]}, "without token_ids"),
    ],
)
def test_tito_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Message(**kwargs)


def test_judge_error_never_carries_a_score():
    with pytest.raises(ValueError, match="total null"):
        RewardBreakdown(total=0.0, status="judge_error")
    with pytest.raises(ValueError, match="needs a total"):
        RewardBreakdown(total=None)


def test_final_report_prefers_answer_tool_call():
    call = ToolCall(id="c1", function=FunctionCall(name="answer", arguments='{"report": "the report"}'))
    t = Trajectory(
        id="a",
        task_id="t",
        messages=[
            Message(role="user", content="task"),
            Message(role="assistant", content="done", tool_calls=[call]),
        ],
    )
    assert t.final_report() == "the report"
    assert t.prompt() == "task"
    t2 = Trajectory(id="b", task_id="t", messages=[Message(role="assistant", content="plain report")])
    assert t2.final_report() == "plain report"


def _sample(n):
    return [
        Trajectory(
            id=f"t{i}",
            task_id="task",
            messages=[Message(role="user", content=f"q{i} ✓"), Message(role="assistant", content="a" * i)],
            info={"i": i},
        )
        for i in range(n)
    ]


def test_store_appends_and_reads_back(tmp_path):
    path = tmp_path / "runs" / "x.jsonl"
    with TrajectoryStore(path) as store:
        store.extend(_sample(3))
    with TrajectoryStore(path) as store:
        store.append(_sample(4)[3])
        assert [t.id for t in store.read()] == ["t0", "t1", "t2", "t3"]
    assert TrajectoryStore(tmp_path / "missing.jsonl").read() == []


def test_truncation_at_any_byte_loses_at_most_the_last_record(tmp_path):
    trajs = _sample(3)
    path = tmp_path / "full.jsonl"
    write_trajectories(path, trajs)
    data = path.read_bytes()
    ends = [i + 1 for i, b in enumerate(data) if b == ord("\n")]
    cut_path = tmp_path / "cut.jsonl"
    for cut in range(len(data) + 1):
        cut_path.write_bytes(data[:cut])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TornLineWarning)
            got = [t.id for t in read_trajectories(cut_path)]
        complete = sum(1 for e in ends if e <= cut)
        assert got[:complete] == [t.id for t in trajs[:complete]]
        assert len(got) in (complete, complete + 1)  # a record that lost only its newline is kept


def test_torn_last_line_warns_and_append_repairs(tmp_path):
    path = tmp_path / "x.jsonl"
    write_trajectories(path, _sample(2))
    data = path.read_bytes()
    path.write_bytes(data + b'{"id": "torn", "task_')
    with pytest.warns(TornLineWarning, match="torn last line"):
        assert [t.id for t in read_trajectories(path)] == ["t0", "t1"]
    with pytest.warns(TornLineWarning, match="removed a torn last line"), TrajectoryStore(path) as store:
        store.append(_sample(3)[2])
    assert path.read_bytes().startswith(data)
    assert [t.id for t in read_trajectories(path)] == ["t0", "t1", "t2"]


def test_append_after_record_missing_only_its_newline(tmp_path):
    path = tmp_path / "x.jsonl"
    write_trajectories(path, _sample(2))
    path.write_bytes(path.read_bytes()[:-1])
    with TrajectoryStore(path) as store:
        store.append(_sample(3)[2])
    assert [t.id for t in read_trajectories(path)] == ["t0", "t1", "t2"]


def test_bad_line_in_the_middle_names_file_and_line(tmp_path):
    path = tmp_path / "x.jsonl"
    lines = [t.to_json() for t in _sample(3)]
    lines[1] = lines[1].replace('"task_id":"task"', '"task_id":5')
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TrajectoryFormatError, match=r"x\.jsonl:2: task_id"):
        list(read_trajectories(path))
    path.write_text(lines[0] + "\nnot json\n" + lines[2] + "\n")
    with pytest.raises(TrajectoryFormatError, match=r"x\.jsonl:2: not a valid trajectory line"):
        list(read_trajectories(path))


def test_unknown_schema_version_is_a_clear_error(tmp_path):
    path = tmp_path / "x.jsonl"
    d = _sample(1)[0].to_dict()
    d["schema_version"] = 99
    path.write_text(json.dumps(d) + "\n")
    with pytest.raises(SchemaVersionError, match=r"x\.jsonl:1: schema_version 99 .*upgrade agentrl"):
        list(read_trajectories(path))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=200))
def test_reader_never_crashes_on_garbage_tail(tmp_path, junk):
    path = tmp_path / "g.jsonl"
    good = b"".join(t.to_json().encode() + b"\n" for t in _sample(2))
    path.write_bytes(good + junk.replace(b"\n", b""))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TornLineWarning)
        try:
            got = [t.id for t in read_trajectories(path)]
        except SchemaVersionError:
            return  # a last line that is a whole JSON object of another schema version is reported
        assert got[:2] == ["t0", "t1"]
