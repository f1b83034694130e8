"""The tool table (``agentrl.trajectory.tools``) is what every reader of a tool's name reads: the
env's schemas, names and argument checks, the Search-R1 tags, the judge's page sources, the report
of an answer, the research shares and the official-source counts."""

from __future__ import annotations

import pytest

from agentrl.trajectory.tools import TOOLS, tool_arg, tools_with_role


def test_the_env_the_parser_and_the_judge_read_the_table():
    from agentrl.env import parser
    from agentrl.env.tools import TOOL_NAMES, TOOL_SCHEMAS, ArgError, check_args
    from agentrl.judge.config import JudgeConfig

    assert TOOL_NAMES == tuple(TOOLS) == ("search", "open_url", "answer")
    assert [s["function"]["name"] for s in TOOL_SCHEMAS] == list(TOOLS)
    for spec, schema in zip(TOOLS.values(), TOOL_SCHEMAS, strict=True):
        params = schema["function"]["parameters"]
        assert set(params["properties"]) == set(spec.parameters) and params["required"] == [spec.arg]
        with pytest.raises(ArgError, match="unknown argument"):  # what a tool takes is its parameters
            check_args(spec.name, {spec.arg: "x", "nope": 1}, 5)
    for name, spec in TOOLS.items():  # a Search-R1 tag per tool, its body the tool's argument
        (call,) = parser.parse_turn(f"<{name}>body</{name}>").calls
        assert (call.name, call.arguments) == (name, {spec.arg: "body"})
    assert JudgeConfig().source_tools == tools_with_role("page") == ("open_url",)


def test_a_call_carries_its_roles_argument_and_no_other():
    assert tool_arg("search", "search", {"query": "q", "k": 3}) == "q"
    assert tool_arg("open_url", "page", {"url": "https://a.example/x"}) == "https://a.example/x"
    assert tool_arg("answer", "answer", {"report": "r"}) == "r"
    assert tool_arg("search", "page", {"query": "q"}) is None  # a search opens no page
    assert tool_arg("open_url", "page", {"url": 7}) is None and tool_arg("open_url", "page", "x") is None
    assert tool_arg("fetch", "page", {"url": "u"}) is None  # not a tool


def test_the_report_of_an_answer_is_the_answer_tools_argument():
    from agentrl.trajectory import FunctionCall, Message, ToolCall, answer_report, first_answer

    assert answer_report({"report": "r"}) == "r" and answer_report({"report": "r", "k": 1}) is None
    calls = [
        ToolCall(id="a", function=FunctionCall(name="search", arguments='{"report": "not an answer"}')),
        ToolCall(id="b", function=FunctionCall(name="answer", arguments='{"report": "the report"}')),
    ]
    assert first_answer(Message(role="assistant", content="", tool_calls=calls)) == (1, "the report")
