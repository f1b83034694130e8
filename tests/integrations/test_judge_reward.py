"""Our LLM judge as TRL's async reward function (and the judge step every adapter's episode runs),
over the real litellm client against the fake OpenAI-compatible judge server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import os

import pytest

from agentrl.integrations import judge_if_needed
from agentrl.integrations.trl import make_reward_func
from tests.judge.conftest import GOOD_REPORT, GOSSIP_REPORT, make_trajectory
from tests.judge.fake_server import FakeJudgeServer

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

# Graded by the fake judge's backtick rule: Fully Satisfied when the phrase is in the report.
RUBRIC = {
    "id": "demo",
    "criteria": [
        {"id": "figure", "text": "Gives the figure `12.3 billion`.", "weight": 1.0},
        {"id": "quarter", "text": "Labels it `Q1 2025`.", "weight": 1.0},
        {"id": "cite", "text": "Cites.", "weight": 0.5, "grader": {"type": "regex", "pattern": r"\\cite\{"}},
    ],
}


@pytest.fixture(scope="module")
def server():
    with FakeJudgeServer() as s:
        yield s


def _pending(report, tid):
    return make_trajectory(report, tid=tid, info={"needs_judge": True, "rubric": RUBRIC})


def _settings(server, scenario):
    judge = {
        "model": f"{scenario}:integrations",
        "api_base": server.url,
        "backoff_base_s": 0.01,
        "timeout_s": 5.0,
    }
    return {"judge": judge}


def test_reward_function_asks_our_judge_for_answers_the_env_could_not_score(server):
    reward = make_reward_func(_settings(server, "good"))
    trajs = [_pending(GOOD_REPORT, "a"), _pending(GOSSIP_REPORT, "b")]
    got = asyncio.run(reward([None] * 2, [None] * 2, [t.model_dump_json() for t in trajs]))
    assert got == [
        1.0,
        0.2,
    ]  # normalised (the default): figure + quarter + cite = 2.5 of 2.5; only cites: 0.5
    assert sum(1 for r in server.requests if r["model"].endswith("integrations")) == 2
    raw = make_reward_func({**_settings(server, "good"), "normalize": False})
    assert asyncio.run(raw([None] * 2, [None] * 2, [t.model_dump_json() for t in trajs])) == [2.5, 0.5]


def test_a_failing_judge_gives_no_reward_never_zero(server):
    reward = make_reward_func(_settings(server, "http500-always"))
    assert asyncio.run(reward([None], [None], [_pending(GOOD_REPORT, "c").model_dump_json()])) == [None]


def test_judge_step_of_the_episode_scores_in_place(server):
    from agentrl.judge import Judge, JudgeConfig

    t = _pending(GOOD_REPORT, "d")
    judge = Judge(JudgeConfig(**_settings(server, "good")["judge"]))
    try:
        asyncio.run(judge_if_needed(t, judge))
    finally:
        judge.close()
    assert t.reward.total == 2.5 and t.info["needs_judge"] is False
    untouched = _pending(GOOD_REPORT, "e")
    asyncio.run(judge_if_needed(untouched, None))  # no judge configured: stays unscored
    assert untouched.reward is None and untouched.info["needs_judge"] is True
