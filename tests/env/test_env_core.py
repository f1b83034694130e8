"""ResearchEnv: the gymnasium contract, tool calls, error observations and budgets."""

from __future__ import annotations

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import agentrl.env
from agentrl.env import ResearchEnv
from agentrl.errors import ConfigError
from agentrl.trajectory import FunctionCall, Message, ToolCall

from .conftest import ALPHABET, call


def test_registered_and_passes_check_env(small_suite):
    env = gymnasium.make(agentrl.env.ENV_ID, config={"suite": str(small_suite)})
    check_env(env.unwrapped, skip_render_check=True)
    obs, info = env.reset(seed=3)
    task = env.unwrapped.task
    assert info["task_id"] == task.id and isinstance(obs, str) and obs.endswith(task.prompt)
    assert [m["role"] for m in info["messages"]] == ["system", "user"]


def test_default_config_runs_on_sandbox():
    env = gymnasium.make(agentrl.env.ENV_ID)
    check_env(env.unwrapped, skip_render_check=True)
    assert len(env.unwrapped.suite.tasks) >= 500


def test_reset_is_seeded(small_suite):
    env = ResearchEnv({"suite": str(small_suite)})
    a = env.reset(seed=11)[1]["task_id"]
    b = env.reset(seed=11)[1]["task_id"]
    assert a == b


def test_search_open_answer_episode():
    env = ResearchEnv({"suite": str(ALPHABET)})
    obs, info = env.reset(options={"task": "alphabet-2025-cloud"})
    assert "2025-05-15" in obs
    obs, r, term, trunc, info = env.step(call("search", query="Alphabet Q1 2025 Google Cloud revenue"))
    assert "abc.xyz" in obs and r == 0.0 and not term and not trunc
    assert info["tool_calls"] == 1 and info["messages"][0]["role"] == "tool"
    obs, *_ = env.step(call("open_url", url="https://abc.xyz/investor/news/2025-04-24-q1-2025-results"))
    assert "$12.3 billion" in obs and "Page 1 of 1" in obs
    report = (
        "The full-year 2025 report is not out yet; in Q1 2025 Google Cloud revenue was $12.3 billion "
        "\\cite{alphabet-q1-2025}."
    )
    obs, r, term, trunc, info = env.step(call("answer", report=report))
    assert term and not trunc and r == pytest.approx(2.5)
    traj = env.trajectory()
    assert traj.reward is not None and traj.reward.total == pytest.approx(2.5)
    assert traj.final_report() == report
    with pytest.raises(gymnasium.error.ResetNeeded):
        env.step("more")


def test_openai_tool_calls_and_plain_text_answer(small_suite):
    env = ResearchEnv({"suite": str(small_suite)})
    env.reset(seed=0)
    msg = Message(
        role="assistant",
        content="",
        tool_calls=[
            ToolCall(id="c1", function=FunctionCall(name="search", arguments='{"query": "revenue"}'))
        ],
    )
    *_, info = env.step(msg)
    assert info["tool_calls"] == 1 and info["messages"][0]["tool_call_id"] == "c1"
    _obs, _r, term, _trunc, info = env.step("I think the answer is unknown.")
    assert term and info["reward_breakdown"] is not None


@pytest.mark.parametrize(
    ("turn", "counter"),
    [
        ("<tool_call>{not json}</tool_call>", "format_errors"),
        ('<tool_call>{"name": "browse", "arguments": {}}</tool_call>', "unknown_tools"),
        ('<tool_call>{"name": "search", "arguments": {"q": "x"}}</tool_call>', "arg_errors"),
        (
            '<tool_call>{"name": "open_url", "arguments": {"url": "https://x.example", "page": 0}}</tool_call>',
            "arg_errors",
        ),
        ("<search>never closed", "format_errors"),
    ],
)
def test_malformed_calls_are_error_observations(small_suite, turn, counter):
    env = ResearchEnv({"suite": str(small_suite)})
    env.reset(seed=0)
    obs, _, term, trunc, info = env.step(turn)
    assert "Error:" in obs and ("<tool_call>" in obs or "<search>" in obs)
    assert info[counter] == 1 and not term and not trunc
    obs, _r, term, trunc, info = env.step(call("search", query="revenue"))  # the episode goes on
    assert info["tool_calls"] == 1


def test_unknown_url_is_a_tool_error(small_suite):
    env = ResearchEnv({"suite": str(small_suite)})
    env.reset(seed=0)
    obs, *_, info = env.step(call("open_url", url="https://nowhere.example/x"))
    assert "404" in obs and info["tool_errors"] == 1


def test_max_turns_truncates(small_suite):
    env = ResearchEnv({"suite": str(small_suite), "budgets": {"max_turns": 2}})
    env.reset(seed=0)
    assert env.step(call("search", query="a revenue"))[3] is False
    _, r, term, trunc, info = env.step(call("search", query="b revenue"))
    assert trunc and not term and info["truncated_reason"] == "max_turns" and r == 0.0


def test_max_tool_calls_truncates(small_suite):
    env = ResearchEnv({"suite": str(small_suite), "budgets": {"max_tool_calls": 2}})
    env.reset(seed=0)
    _, _, _, trunc, info = env.step(
        call("search", query="a") + call("search", query="b") + call("search", query="c")
    )
    assert trunc and info["truncated_reason"] == "max_tool_calls" and info["tool_calls"] == 2


def test_observation_and_total_char_budgets(small_suite):
    env = ResearchEnv({"suite": str(small_suite), "budgets": {"max_obs_chars": 100, "max_total_chars": 4000}})
    env.reset(seed=0)
    obs, *_, info = env.step(call("search", query="revenue quarter results", k=10))
    assert "[... truncated:" in obs and info["obs_truncations"] == 1
    trunc = False
    for _ in range(10):
        _, _, _, trunc, info = env.step("x" * 900 + call("search", query="revenue"))
        if trunc:
            break
    assert trunc and info["truncated_reason"] == "max_total_chars"


def test_open_url_pages(small_suite):
    env = ResearchEnv({"suite": str(small_suite), "page_chars": 200})
    env.reset(seed=0)
    url = env.task.ground_truth["official"]["url"]
    first, *_ = env.step(call("open_url", url=url))
    assert "Page 1 of" in first and "page=2" in first
    second, *_ = env.step(call("open_url", url=url, page=2))
    assert "Page 2 of" in second
    bad, *_ = env.step(call("open_url", url=url, page=999))
    assert "out of range" in bad


def test_fault_injection_is_seeded(small_suite):
    def run(seed):
        env = ResearchEnv({"suite": str(small_suite), "tool_error_rate": 0.5})
        env.reset(seed=seed, options={"task": env.suite.tasks[0].id})
        outs = [env.step(call("search", query=f"q{i} revenue"))[0].startswith("Error") for i in range(6)]
        return outs, env.counts["injected_faults"]

    outs, faults = run(5)
    assert run(5) == (outs, faults)
    # every injected fault is an error observation, and at rate 0.5 some calls fail and some do not
    assert sum(outs) == faults and 0 < faults < 6
    assert any(run(s)[0] != outs for s in (6, 7))  # another seed, another pattern


def test_bad_config_names_the_field(small_suite):
    with pytest.raises(ConfigError, match=r"budgets\.max_turns"):
        ResearchEnv({"suite": str(small_suite), "budgets": {"max_turns": 0}})
    with pytest.raises(ConfigError, match="serach"):
        ResearchEnv({"suite": str(small_suite), "serach": {}})
    with pytest.raises(ConfigError, match="no task"):
        ResearchEnv({"suite": str(small_suite)}).reset(options={"task": "nope"})


def test_search_r1_format(small_suite):
    env = ResearchEnv({"suite": str(small_suite), "tool_format": "search_r1"})
    obs, _ = env.reset(seed=0)
    assert "<search>" in obs
    obs, *_ = env.step("<think>hmm</think><search>revenue results</search>")
    assert obs.startswith("<information>") and obs.endswith("</information>")
    _, _r, term, *_ = env.step("<answer>no idea</answer>")
    assert term


def test_trajectory_carries_its_rubric_for_the_judge():
    from agentrl.judge import parse_rubric, resolve_rubric, score_deterministic

    env = ResearchEnv({"suite": str(ALPHABET)})
    env.reset(options={"task": "alphabet-2025-cloud"})
    env.step(
        call("answer", report="Q1 2025 Google Cloud revenue was $12.3 billion \\cite{alphabet-q1-2025}.")
    )
    traj = env.trajectory()
    rubric = resolve_rubric(traj, None)  # what `agentrl judge` does without --rubric
    assert rubric == parse_rubric(traj.info["rubric"])
    assert rubric.content_hash == env.rubric.content_hash
    assert score_deterministic(rubric, traj.final_report()).total == traj.reward.total
