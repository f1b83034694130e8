"""Fuzzing the tool-call parser and the env step behind it: no turn may raise, and every call the
turn contains comes back as a parsed call or as an error (which the env turns into an ``Error:``
observation), never silently dropped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrl.env.parser import ParsedCall, ParsedTurn, parse_turn
from agentrl.trajectory import FunctionCall, Message, ToolCall

ALPHABET = Path(__file__).resolve().parents[2] / "envs" / "alphabet-2025"
FUZZ = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Text without '<' so that generated payloads never open or close a tag by accident.
plain = st.text(st.characters(blacklist_characters="<", blacklist_categories=("Cs",)), max_size=12)
scalars = st.none() | st.booleans() | st.integers() | st.floats() | plain
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(plain, inner, max_size=3),
    max_leaves=10,
)
deep = st.builds(
    lambda depth, opener: opener * depth,
    st.integers(1, 50_000),
    st.sampled_from(["[", '{"a":', '{"arguments":']),
)


def _dumps(v: object) -> str:
    return json.dumps(v, allow_nan=True)


@st.composite
def call_payloads(draw) -> str:
    """The text between <tool_call> tags: a good call, a wrong-shaped object, cut JSON or deep nesting."""
    kind = draw(st.sampled_from(["good", "shape", "cut", "deep", "raw"]))
    if kind == "good":
        args = draw(st.dictionaries(plain, json_values, max_size=3))
        name = draw(st.sampled_from(["search", "open_url", "answer"]) | plain)
        as_string = draw(st.booleans())
        return _dumps({"name": name, "arguments": _dumps(args) if as_string else args})
    if kind == "shape":
        return _dumps(
            draw(st.dictionaries(st.sampled_from(["name", "arguments", "function", "x"]), json_values))
        )
    if kind == "cut":
        whole = _dumps({"name": draw(plain), "arguments": draw(json_values)})
        return whole[: draw(st.integers(0, max(0, len(whole) - 1)))]
    if kind == "deep":
        return draw(deep)
    return draw(plain)


def _check(turn: ParsedTurn) -> None:
    assert isinstance(turn, ParsedTurn)
    for c in turn.calls:
        assert isinstance(c, ParsedCall) and isinstance(c.name, str) and c.name == c.name.strip() and c.name
        assert isinstance(c.arguments, dict)
    for e in turn.errors:
        assert isinstance(e.message, str) and e.message


def _hermes(segments: list[tuple[str, str, bool]]) -> str:
    return "".join(f"{j}<tool_call>{p}" + ("</tool_call>" if closed else "") for j, p, closed in segments)


@FUZZ
@given(st.lists(st.tuples(plain, call_payloads()), min_size=1, max_size=4), st.booleans(), plain)
def test_hermes_calls_each_become_a_call_or_an_error(segments, last_closed, tail):
    # Every call closed, except perhaps the last one (cut at a stop token): one result per call.
    text = _hermes([(j, p, True) for j, p in segments[:-1]] + [(*segments[-1], last_closed)])
    turn = parse_turn(text + tail if last_closed else text)
    _check(turn)
    assert turn.format == "hermes"
    assert len(turn.calls) + len(turn.errors) == len(segments)


@FUZZ
@given(st.lists(st.tuples(plain, call_payloads(), st.booleans()), min_size=1, max_size=4))
def test_hermes_unclosed_calls_never_vanish_silently(segments):
    # A call left open in the middle runs into the next one: fewer results, but then one is an error.
    turn = parse_turn(_hermes(segments))
    _check(turn)
    got = len(turn.calls) + len(turn.errors)
    assert 1 <= got <= len(segments)
    assert got == len(segments) or turn.errors


@FUZZ
@given(st.dictionaries(plain, json_values, max_size=4), st.sampled_from(["search", "open_url", "answer"]))
def test_a_well_formed_hermes_call_reads_back_exactly(args, name):
    turn = parse_turn(f"<tool_call>{_dumps({'name': name, 'arguments': args})}</tool_call>")
    assert not turn.errors and len(turn.calls) == 1
    got = turn.calls[0]
    assert got.name == name and _dumps(got.arguments) == _dumps(args)


@FUZZ
@given(
    st.lists(
        st.tuples(st.sampled_from(["search", "answer", "open_url"]), plain, st.booleans()),
        min_size=1,
        max_size=4,
    )
)
def test_search_r1_tags_become_calls_or_one_unclosed_error(tags):
    text = "".join(f"<{t}>{body}" + (f"</{t}>" if closed else "") for t, body, closed in tags)
    turn = parse_turn(text)
    _check(turn)
    assert turn.format == "search_r1"
    if any(closed for _, _, closed in tags):
        assert turn.calls and not turn.errors
    else:
        assert not turn.calls and len(turn.errors) == 1 and "never closed" in turn.errors[0].message


@st.composite
def openai_arguments(draw) -> str:
    kind = draw(st.sampled_from(["good", "notobj", "cut", "deep", "raw"]))
    if kind == "good":
        return _dumps(draw(st.dictionaries(plain, json_values, max_size=3)))
    if kind == "notobj":
        return _dumps(draw(json_values))
    if kind == "cut":
        whole = _dumps(draw(st.dictionaries(plain, json_values, min_size=1, max_size=3)))
        return whole[: draw(st.integers(0, len(whole) - 1))]
    if kind == "deep":
        return draw(deep)
    return draw(st.text(max_size=20))


@FUZZ
@given(st.lists(st.tuples(st.text(max_size=10), openai_arguments()), min_size=1, max_size=4))
def test_openai_tool_calls_each_become_a_call_or_an_error(calls):
    msg = Message(
        role="assistant",
        content=None,
        tool_calls=[
            ToolCall(id=f"c{i}", function=FunctionCall(name=n, arguments=a)) for i, (n, a) in enumerate(calls)
        ],
    )
    turn = parse_turn(msg)
    _check(turn)
    assert turn.format == "openai" and len(turn.calls) + len(turn.errors) == len(calls)
    # and as a plain message dict, as a policy may hand it over
    turn = parse_turn(msg.model_dump(exclude_none=True))
    assert len(turn.calls) + len(turn.errors) == len(calls)


@FUZZ
@given(st.dictionaries(st.sampled_from(["role", "content", "tool_calls", "name", "token_ids"]), json_values))
def test_arbitrary_message_dicts_never_raise(d):
    _check(parse_turn(d))


@pytest.mark.parametrize(
    "action",
    [
        "<tool_call>" + "[" * 100_000 + "</tool_call>",
        '<tool_call>{"name": "search", "arguments": "' + "[" * 100_000 + '"}</tool_call>',
        {
            "content": None,
            "tool_calls": [{"id": "a", "function": {"name": "search", "arguments": "[" * 100_000}}],
        },
    ],
    ids=["hermes", "hermes-string-arguments", "openai"],
)
def test_deeply_nested_json_is_a_format_error_not_a_recursion_error(action):
    """Regression: json.loads raises RecursionError (not ValueError) on deep nesting; it escaped the parser."""
    turn = parse_turn(action)
    assert not turn.calls and len(turn.errors) == 1 and "not valid JSON" in turn.errors[0].message

    from agentrl.env import ResearchEnv

    env = ResearchEnv({"suite": str(ALPHABET)})
    env.reset(seed=0)
    obs, reward, terminated, _, info = env.step(action)
    assert obs.startswith("Error:") and info["format_errors"] == 1 and not terminated and reward == 0.0


@pytest.fixture(scope="module")
def env():
    from agentrl.env import ResearchEnv

    return ResearchEnv({"suite": str(ALPHABET)})


turns = st.one_of(
    st.lists(st.tuples(plain, call_payloads(), st.booleans()), min_size=1, max_size=3).map(_hermes),
    st.lists(st.tuples(plain, openai_arguments()), min_size=1, max_size=3).map(
        lambda calls: {
            "content": None,
            "tool_calls": [
                {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": a}}
                for i, (n, a) in enumerate(calls)
            ],
        }
    ),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(turns, min_size=1, max_size=4))
def test_env_answers_every_broken_call_with_an_error_observation(env, actions):
    env.reset(seed=0)
    for action in actions:
        before = {k: env.counts[k] for k in ("format_errors", "unknown_tools", "arg_errors")}
        obs, reward, terminated, truncated, info = env.step(action)
        assert isinstance(obs, str) and isinstance(reward, float)
        parsed = parse_turn(action, turn_index=env.turns)
        errors = sum(info[k] - before[k] for k in before)
        observations = info["messages"]
        assert errors >= len(parsed.errors)  # every unreadable call was counted ...
        assert sum(m["content"].startswith("Error:") for m in observations) == errors  # ... and answered
        assert terminated or truncated or observations  # the turn is an action or gets an observation
        if terminated or truncated:
            break


@pytest.mark.parametrize(
    "action",
    [
        {"content": None, "tool_calls": "nonsense"},
        {"content": None, "tool_calls": [{"id": "a", "function": {"name": "search"}, "type": "bogus"}]},
        {"content": "", "tool_calls": [{"function": {"arguments": "{}"}}]},
    ],
)
def test_a_message_dict_with_broken_tool_calls_is_a_format_error_not_a_final_answer(env, action):
    """Regression: the env kept only the dict's content, so broken tool_calls became an empty final report."""
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(action)
    assert not terminated and not truncated and reward == 0.0
    assert info["format_errors"] == 1 and obs.startswith("Error:")
    assert env.report is None
    # the model is told which field is wrong, in one line, without pydantic's help URLs
    first = obs.splitlines()[0]
    assert "tool_calls" in first and "errors.pydantic.dev" not in obs


urls = st.one_of(
    st.text(st.sampled_from("[]:/@%?#. abc1\\x"), max_size=24).map(lambda t: "https://" + t),
    st.sampled_from(
        ["https://[ir.example.com/news", "http://[::1/x", "https://a]b[/", "[", "https://h:99999/"]
    ),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(urls)
def test_any_url_the_policy_writes_is_an_observation_and_a_score_never_an_exception(env, url):
    """A sampled URL that ``urlsplit`` refuses (an unclosed IPv6 bracket: a CPU training run of the
    long-horizon suite died on one in the sandbox's fetch) is a 404 observation, and an answer
    citing it is scored."""
    env.reset(seed=0)
    call = {"name": "open_url", "arguments": {"url": url}}
    obs, *_ = env.step(f"<tool_call>{json.dumps(call)}</tool_call>")
    assert isinstance(obs, str) and obs
    report = f"Revenue was $1 billion \\\\cite{{{url}}}."
    call = {"name": "answer", "arguments": {"report": report}}
    _, reward, terminated, _, _ = env.step(f"<tool_call>{json.dumps(call)}</tool_call>")
    assert terminated and isinstance(reward, float)
