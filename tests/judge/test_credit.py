"""Turn credit on hand-built episodes: which turn a figure is credited to, and how much."""

from __future__ import annotations

import json

import pytest

from agentrl.judge import evidence_turn_credit, parse_rubric, score_deterministic
from agentrl.judge.evidence import evidence_of
from agentrl.trajectory import Message, RewardBreakdown, Trajectory


def _call(i: int, name: str, **args: str) -> dict:
    return {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def _episode(report: str) -> Trajectory:
    """Turn 0 searches (the snippet prints $12.3 billion), turn 1 opens a page printing $4.5 billion
    (and a rumoured $9.9 billion),
    turn 2 opens the page printing $12.3 billion, turn 3 opens it again, turn 4 answers."""
    calls = [
        _call(0, "search", query="q"),
        _call(1, "open_url", url="https://a.example/other"),
        _call(2, "open_url", url="https://a.example/release"),
        _call(3, "open_url", url="https://a.example/release"),
    ]
    texts = [
        "1. [a.example] Revenue of $12.3 billion",
        "URL: https://a.example/other\nCosts were $4.5 billion; a rumour says $9.9 billion.",
        "URL: https://a.example/release\nRevenue was $12.3 billion.",
        "URL: https://a.example/release\nRevenue was $12.3 billion.",
    ]
    msgs = [Message(role="system", content="s"), Message(role="user", content="task")]
    for c, text in zip(calls, texts, strict=True):
        msgs.append(Message.model_validate({"role": "assistant", "content": "", "tool_calls": [c]}))
        msgs.append(Message(role="tool", tool_call_id=c["id"], content=text))
    msgs.append(Message(role="assistant", content=report))
    return Trajectory(id="t", task_id="t", messages=msgs)


def _rubric(opened: bool = True, flaw: float = -1.0):
    return parse_rubric(
        {
            "id": "r",
            "criteria": [
                {
                    "id": "rev",
                    "text": "revenue",
                    "weight": 1.0,
                    "grader": {"type": "figure", "value": 12.3, "unit": "billion", "opened": opened},
                },
                {
                    "id": "cost",
                    "text": "costs",
                    "weight": 0.5,
                    "grader": {"type": "figure", "value": 4.5, "unit": "billion", "opened": opened},
                },
                {
                    "id": "style",
                    "text": "says revenue",
                    "weight": 2.5,
                    "grader": {"type": "contains", "text": "revenue"},
                },
                {
                    "id": "hype",
                    "kind": "negative",
                    "text": "hype",
                    "weight": flaw,
                    "grader": {"type": "contains", "text": "record"},
                },
                {
                    "id": "rumour",
                    "kind": "negative",
                    "text": "states the rumour",
                    "weight": -0.5,
                    "grader": {"type": "figure", "value": 9.9, "unit": "billion", "opened": opened},
                },
            ],
        }
    )


def _credit(report: str, rubric) -> tuple[list[float], RewardBreakdown]:
    traj = _episode(report)
    reward = score_deterministic(rubric, report, evidence=evidence_of(traj))
    return evidence_turn_credit(traj, rubric, reward), reward


def test_each_figure_goes_to_the_first_turn_that_opened_a_page_printing_it():
    credit, reward = _credit("revenue $12.3 billion, costs $4.5 billion", _rubric())
    assert reward.total == pytest.approx(4.0)
    # positive weight 4.0: rev (1.0) to turn 2 (the search snippet of turn 0 does not count, nor
    # the second opening in turn 3), cost (0.5) to turn 1; the contains criterion stays on the outcome.
    assert credit == pytest.approx([0.0, 0.5 / 4.0, 1.0 / 4.0, 0.0, 0.0])


def test_a_figure_that_need_only_be_seen_goes_to_the_search_that_showed_it():
    credit, _ = _credit("revenue $12.3 billion, costs $4.5 billion", _rubric(opened=False))
    assert credit == pytest.approx([1.0 / 4.0, 0.5 / 4.0, 0.0, 0.0, 0.0])


def test_negatives_and_unpaid_figures_stay_on_the_outcome():
    # two flaws (one a figure read on the page of turn 1) and no cost figure: only revenue is credited
    credit, reward = _credit("record revenue $12.3 billion; some say $9.9 billion", _rubric())
    assert reward.total == pytest.approx(1.0 + 2.5 - 1.0 - 0.5)
    assert {c.id: c.score for c in reward.criteria}["rumour"] == 1.0
    assert credit == pytest.approx([0.0, 0.0, 1.0 / 4.0, 0.0, 0.0])
    assert sum(credit) <= reward.total / 4.0  # here no more than the normalised reward


def test_no_reward_no_credit():
    traj, rubric = _episode("revenue $12.3 billion"), _rubric()
    assert evidence_turn_credit(traj, rubric, None) == [0.0] * 5
    error = RewardBreakdown(total=None, status="judge_error", error="x")
    assert evidence_turn_credit(traj, rubric, error) == [0.0] * 5
