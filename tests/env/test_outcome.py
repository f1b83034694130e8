"""The env owns the outcome: which report an episode gave, and what an episode without one gets.

One rule, read by every path: the env's step reward, ``Trajectory.final_report()``, ``agentrl judge``
and ``agentrl replay --rubric`` must agree on the same stored trajectory.
"""

from __future__ import annotations

import json
import math

import pytest

from agentrl.env import ResearchEnv
from agentrl.errors import ConfigError
from agentrl.trajectory import (
    FunctionCall,
    Message,
    ToolCall,
    Trajectory,
    write_trajectories,
)

from .conftest import ALPHABET, call, judge_and_replay

TASK = "alphabet-2025-cloud"  # deterministic rubric: accuracy 1 + temporal 1 + citation 0.5
RUBRIC = ALPHABET / "rubrics" / "cloud-offline.yaml"
RIGHT = (
    "The full-year 2025 report is not out yet; in Q1 2025 Google Cloud revenue was $12.3 billion "
    "\\cite{alphabet-q1-2025}."
)
WRONG = "Google's full-year 2025 revenue is $5 trillion \\cite{gossip-alphabet-2025}."
SEARCH = {"query": "Alphabet Q1 2025 Google Cloud revenue"}
Q1_URL = "https://abc.xyz/investor/news/2025-04-24-q1-2025-results"
GOSSIP_URL = "https://buzzstock-gossip.example/t/google-2025-revenue-5-trillion"


def hermes(*calls: tuple[str, dict]) -> str:
    return "\n".join(call(name, **args) for name, args in calls)


def openai(*calls: tuple[str, dict]) -> Message:
    return Message(
        role="assistant",
        content="",
        tool_calls=[
            ToolCall(id=f"c{i}", function=FunctionCall(name=n, arguments=json.dumps(a)))
            for i, (n, a) in enumerate(calls)
        ],
    )


def cut(text: str) -> Message:
    """A turn the engine stopped at ``max_new_tokens``."""
    return Message(role="assistant", content=text, finish_reason="length")


# name → (turns, the report the env must take (None: unanswered), its reward, tool calls run, calls after answer)
EPISODES: dict[str, tuple[list, str | None, float, int, int]] = {
    "wrong_then_right": (
        [hermes(("answer", {"report": WRONG}), ("answer", {"report": RIGHT}))],
        WRONG,
        0.5,
        0,
        1,
    ),
    "right_then_wrong": (
        [hermes(("answer", {"report": RIGHT}), ("answer", {"report": WRONG}))],
        RIGHT,
        2.5,
        0,
        1,
    ),
    "openai_wrong_then_right": (
        [openai(("answer", {"report": WRONG}), ("answer", {"report": RIGHT}))],
        WRONG,
        0.5,
        0,
        1,
    ),
    "search_then_answer": ([hermes(("search", SEARCH), ("answer", {"report": RIGHT}))], RIGHT, 2.5, 1, 0),
    "answer_then_search": ([hermes(("answer", {"report": WRONG}), ("search", SEARCH))], WRONG, 0.5, 0, 1),
    # an answer call with a bad argument is an argument error, not a report; the next one is
    "bad_answer_then_right": (
        [hermes(("answer", {"report": WRONG, "score": 1}), ("answer", {"report": RIGHT}))],
        RIGHT,
        2.5,
        0,
        0,
    ),
    # a turn cut by the token limit is never the report, neither as text nor as an answer call
    "cut_text_then_wrong": ([cut(RIGHT), call("answer", report=WRONG)], WRONG, 0.5, 0, 0),
    "cut_answer_then_wrong": ([cut(call("answer", report=RIGHT)), WRONG], WRONG, 0.5, 0, 0),
    "cut_then_out_of_turns": (
        [cut(RIGHT), cut(call("answer", report=RIGHT)), call("search", **SEARCH)],
        None,
        0.0,
        1,
        0,
    ),
}


def open_both() -> str:
    """The research first: both reports cite a page, and the rubric pays a citation only of a page opened."""
    return hermes(("open_url", {"url": Q1_URL}), ("open_url", {"url": GOSSIP_URL}))


def run_episode(turns: list, **config) -> tuple[Trajectory, float, dict]:
    env = ResearchEnv({"suite": str(ALPHABET), "budgets": {"max_turns": 4}, **config})
    env.reset(options={"task": TASK})
    reward, info, done = 0.0, {}, False
    for turn in [open_both(), *turns]:
        assert not done, "the episode ended before its last turn"
        _, reward, term, trunc, info = env.step(turn)
        done = term or trunc
    assert done
    return env.trajectory(), reward, info


@pytest.fixture(scope="module")
def episodes() -> dict[str, tuple[Trajectory, float, dict]]:
    return {name: run_episode(turns) for name, (turns, *_) in EPISODES.items()}


@pytest.mark.parametrize("name", list(EPISODES))
def test_the_env_takes_the_first_valid_answer_of_an_uncut_turn(episodes, name):
    _, report, reward, ran, after = EPISODES[name]
    traj, step_reward, info = episodes[name]
    assert step_reward == pytest.approx(reward) and traj.reward.total == pytest.approx(reward)
    assert traj.final_report() == (report or "")
    assert traj.info["status"] == ("answered" if report else "unanswered")
    assert traj.info["tool_calls"] == ran + 2 and traj.info["calls_after_answer"] == after
    if report is None:  # recorded once, by the env: reward 0 with the reason
        assert info["reward_status"] == "unanswered" and traj.info["truncated_reason"] == "max_turns"
        assert traj.reward.error == "no final answer (max_turns)"
    else:
        assert info["reward_status"] == "scored"


def test_cut_turns_get_an_error_observation_and_are_counted(episodes):
    traj, _, _ = episodes["cut_then_out_of_turns"]
    errors = [m.text for m in traj.messages if m.role == "tool"]
    errors = errors[2:]  # after the two pages opened
    assert traj.info["cut_turns"] == 2 and len(errors) == 3
    assert "token limit" in errors[0] and "not a final answer" in errors[0]
    assert "token limit" in errors[1] and "answer is not taken" in errors[1]


def test_env_judge_cli_and_replay_give_the_same_reward(episodes, tmp_path):
    """The stored trajectories, re-scored by ``agentrl judge`` (rubric from ``info.rubric``) and by
    ``agentrl replay --rubric``, get exactly the env's reward."""
    stored = tmp_path / "run.jsonl"
    write_trajectories(
        stored, [t.model_copy(update={"id": name, "reward": None}) for name, (t, _, _) in episodes.items()]
    )
    by_judge, by_replay = judge_and_replay(stored, RUBRIC, tmp_path)
    for name, (traj, step_reward, _) in episodes.items():
        assert by_judge[name].total == step_reward == traj.reward.total, name
        assert by_replay[name].total == step_reward, name
        assert by_judge[name].error == traj.reward.error, name


FOREIGN = {
    "llama3_json": '{"name": "answer", "parameters": {"report": "%s"}}',
    "llama3_json_list": '[{"name": "answer", "parameters": {"report": "%s"}}]',
    "llama3_json_after_prose": 'I have the answer. {"name": "answer", "parameters": {"report": "%s"}}',
    "python_tag": '<|python_tag|>{"name": "answer", "parameters": {"report": "%s"}}<|eom_id|>',
    "python_tag_call": '<|python_tag|>answer.call(report="%s")',
    "mistral": '[TOOL_CALLS] [{"name": "answer", "arguments": {"report": "%s"}}]',
    "mistral_v11": '[TOOL_CALLS]answer[ARGS]{"report": "%s"}',
    "json_block": 'Done.\n```json\n{"name": "answer", "arguments": {"report": "%s"}}\n```',
}
REPORT = (
    "Q1 2025 Google Cloud revenue was $12.3 billion; the full year is not out yet \\\\cite{alphabet-q1-2025}."
)


@pytest.mark.parametrize("fmt", list(FOREIGN))
def test_other_families_formats_are_never_a_report(fmt):
    env = ResearchEnv({"suite": str(ALPHABET)})  # tool_format: hermes
    env.reset(options={"task": TASK})
    obs, reward, term, trunc, info = env.step(FOREIGN[fmt] % REPORT)
    assert not term and not trunc and reward == 0.0
    assert info["format_errors"] == 1 and info["status"] == "running"
    assert "does not read" in obs and "<tool_call>" in obs  # the expected format is shown
    assert env.trajectory().final_report() == ""


@pytest.mark.parametrize("fmt", list(FOREIGN))
def test_auto_tool_format_runs_them(fmt):
    env = ResearchEnv({"suite": str(ALPHABET), "tool_format": "auto"})
    env.reset(options={"task": TASK})
    env.step(open_both())
    _, reward, term, _, info = env.step(FOREIGN[fmt] % REPORT)
    traj = env.trajectory()
    assert term and reward == pytest.approx(2.5) and info["format_errors"] == 0
    assert traj.final_report() == REPORT.replace("\\\\", "\\")
    assert traj.messages[-1].tool_call_format is not None  # calls in the text: not rendered twice


def test_auto_runs_a_foreign_search_and_hermes_still_works_everywhere():
    env = ResearchEnv({"suite": str(ALPHABET), "tool_format": "auto"})
    env.reset(options={"task": TASK})
    obs, _, term, _, info = env.step('[TOOL_CALLS]search[ARGS]{"query": "Alphabet Q1 2025 Google Cloud"}')
    assert not term and info["tool_calls"] == 1 and "abc.xyz" in obs
    env.step(open_both())
    _, reward, term, _, _ = env.step(call("answer", report=RIGHT))
    assert term and reward == pytest.approx(2.5)


def test_a_failed_inline_judge_is_nan_with_its_status():
    from tests.judge.fake_server import FakeJudgeServer

    with FakeJudgeServer() as server:  # "http400": the judge call fails and is not retried
        cfg = {
            "suite": str(ALPHABET),
            "judge": "inline",
            "judge_model": "http400",
            "judge_api_base": server.url,
        }
        env = ResearchEnv(cfg)
        env.reset(options={"task": "alphabet-2025-cloud-llm"})
        _, reward, term, _, info = env.step(call("answer", report=RIGHT))
    assert term and math.isnan(reward)
    assert info["reward_status"] == "judge_error" and not info["needs_judge"]
    traj = env.trajectory()
    assert traj.reward.status == "judge_error" and traj.reward.total is None
    assert traj.info["status"] == "answered" and traj.final_report() == RIGHT


def test_judge_modes():
    # deferred (the default): an LLM rubric is left to a batched judge, a deterministic one scored now
    env = ResearchEnv({"suite": str(ALPHABET)})
    env.reset(options={"task": "alphabet-2025-cloud-llm"})
    _, reward, term, _, info = env.step(call("answer", report=RIGHT))
    assert term and reward == 0.0 and info["reward_status"] == "needs_judge" and info["needs_judge"]
    assert env.trajectory().reward is None
    # deterministic: an LLM rubric is a config error at reset, naming the task and the LLM criteria
    env = ResearchEnv({"suite": str(ALPHABET), "judge": "deterministic"})
    env.reset(options={"task": TASK})
    with pytest.raises(ConfigError, match=r"alphabet-2025-cloud-llm: .*LLM criteria \(accuracy, temporal\)"):
        env.reset(options={"task": "alphabet-2025-cloud-llm"})
    # inline: a judge model is required, at construction
    with pytest.raises(ConfigError, match="judge: inline needs judge_model"):
        ResearchEnv({"suite": str(ALPHABET), "judge": "inline"})


def test_hand_built_trajectories_follow_the_same_rule():
    """A trajectory the env did not write (no ``info.status``): the first valid answer, never a cut turn."""

    def traj(*messages: Message) -> Trajectory:
        return Trajectory(id="h", task_id="t", messages=[Message(role="user", content="q"), *messages])

    two = openai(("answer", {"report": WRONG}), ("answer", {"report": RIGHT}))
    assert traj(two).final_report() == WRONG
    bad = openai(("answer", {"report": WRONG, "score": 1}), ("answer", {"report": RIGHT}))
    assert traj(bad).final_report() == RIGHT  # the env answers the first with an argument error
    assert traj(cut(RIGHT), Message(role="assistant", content=WRONG)).final_report() == WRONG
    assert traj(cut(RIGHT)).final_report() == ""
    assert traj(openai(("search", SEARCH))).final_report() == ""
