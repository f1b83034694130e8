"""The tool-call parser: formats, and the property that arbitrary text never raises."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.env.parser import parse_turn
from agentrl.trajectory import FunctionCall, Message, ToolCall


def test_hermes_several_calls_and_string_arguments():
    t = parse_turn(
        'a <tool_call>{"name": "search", "arguments": {"query": "x"}}</tool_call> b '
        '<tool_call>{"name": "open_url", "arguments": "{\\"url\\": \\"u\\"}"}</tool_call>'
    )
    assert t.format == "hermes" and [c.name for c in t.calls] == ["search", "open_url"]
    assert t.calls[1].arguments == {"url": "u"} and not t.errors
    assert t.calls[0].id != t.calls[1].id


def test_hermes_unclosed_last_call_is_read():
    t = parse_turn('<tool_call>{"name": "answer", "arguments": {"report": "r"}}')
    assert t.calls[0].arguments == {"report": "r"}


def test_hermes_errors():
    t = parse_turn(
        '<tool_call>{"arguments": {}}</tool_call><tool_call>[1]</tool_call><tool_call>{x</tool_call>'
    )
    assert not t.calls and len(t.errors) == 3


def test_search_r1_tags_and_think_is_ignored():
    t = parse_turn("<think><search>not this</search></think><search> q1 </search><answer>done</answer>")
    assert [(c.name, c.arguments) for c in t.calls] == [
        ("search", {"query": "q1"}),
        ("answer", {"report": "done"}),
    ]


def test_openai_tool_calls_win():
    m = Message(
        role="assistant",
        content="<search>x</search>",
        tool_calls=[
            ToolCall(id="a", function=FunctionCall(name="search", arguments='{"query": "y"}')),
            ToolCall(id="b", function=FunctionCall(name="search", arguments="{bad")),
        ],
    )
    t = parse_turn(m)
    assert t.format == "openai" and t.calls[0].arguments == {"query": "y"} and len(t.errors) == 1


def test_plain_text_has_no_calls():
    t = parse_turn("The answer is 42.")
    assert not t.calls and not t.errors


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_arbitrary_text_never_raises(text):
    parse_turn(text)


_pieces = st.sampled_from(
    [
        "<tool_call>",
        "</tool_call>",
        "{",
        "}",
        '"name"',
        ":",
        '"search"',
        '"arguments"',
        "<search>",
        "</search>",
        "<answer>",
        "</answer>",
        "<think>",
        "</think>",
        "null",
        "[",
        "]",
        "<|python_tag|>",
        "[TOOL_CALLS]",
        "[ARGS]",
        "```json\n",
        "```",
        '"parameters"',
        ".call(",
        "=",
        ")",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_pieces, st.text(max_size=5)), max_size=30))
def test_tag_soup_never_raises(parts):
    t = parse_turn("".join(parts))
    for c in t.calls:
        assert isinstance(c.arguments, dict) and c.name


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(st.text(max_size=5), st.one_of(st.none(), st.text(max_size=5), st.integers())),
    st.text(max_size=20),
)
def test_message_dicts_never_raise(args, name):
    import json

    parse_turn(
        {
            "content": None,
            "tool_calls": [{"id": "x", "function": {"name": name, "arguments": json.dumps(args)}}],
        }
    )
    parse_turn({"content": 5, "tool_calls": "nonsense"})


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(_pieces, st.text(max_size=8)), max_size=20))
def test_env_step_never_raises_on_arbitrary_turns(parts):
    from agentrl.env import ResearchEnv

    from .conftest import ALPHABET

    env = ResearchEnv({"suite": str(ALPHABET)})
    env.reset(seed=0)
    obs, reward, terminated, truncated, _ = env.step("".join(parts))
    assert isinstance(obs, str) and isinstance(reward, float)
    assert terminated or truncated or obs  # a turn that is not an answer always gets an observation


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["<|python_tag|>", "[TOOL_CALLS]", '{"name":', '[{"name": "answer",', "<tool_call>"]),
    st.lists(st.one_of(_pieces, st.text(max_size=8)), max_size=12),
)
def test_a_turn_opening_with_a_call_marker_is_never_a_report(marker, parts):
    """Whatever follows a tool-call marker, the turn is a call or a format error, never the final answer."""
    from agentrl.env import ResearchEnv

    from .conftest import ALPHABET

    text = marker + "".join(parts)
    turn = parse_turn(text)
    assert turn.format != "none" and (turn.calls or turn.errors)
    env = ResearchEnv({"suite": str(ALPHABET)})
    env.reset(options={"task": "alphabet-2025-cloud"})
    env.step(text)
    assert env.trajectory().info["report"] is None or any(c.name == "answer" for c in turn.calls)


@pytest.mark.parametrize("marker", ["<|python_tag|>", "[TOOL_CALLS]"])
def test_an_empty_list_of_calls_after_a_marker_is_a_format_error(marker):
    """``<|python_tag|>[]`` (found by the property test above): a marker and no call was a turn with
    neither calls nor errors, which the env takes as the final answer."""
    turn = parse_turn(marker + "[]")
    assert not turn.calls and [e.message for e in turn.errors] == [
        f"the list of tool calls in {marker} is empty"
    ]
