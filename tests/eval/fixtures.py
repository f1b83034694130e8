"""Judged trajectories built in memory for the evaluation tests, and episodes built call by call for
the research shares (``agentrl.eval.research``: the scorecard's and the run report's)."""

from __future__ import annotations

import json
from typing import Any

from agentrl.trajectory import CriterionScore, Message, RewardBreakdown, Trajectory


def traj(
    task: str,
    sample: int,
    reward: float | None,
    *,
    criteria: dict[str, float] | None = None,
    status: str = "answered",
    judge_error: bool = False,
    **info: Any,
) -> Trajectory:
    """Trajectory ``task#sample`` with normalised reward ``reward`` (None: unjudged), its criteria
    as ``{id: score}`` (an id starting with ``neg-`` is a negative criterion), and ``info``."""
    if judge_error:
        rb: RewardBreakdown | None = RewardBreakdown(total=None, status="judge_error", error="boom")
    elif reward is None:
        rb = None
    else:
        crits = [
            CriterionScore(
                id=c,
                score=s,
                weight=-1.0 if c.startswith("neg-") else 1.0,
                kind="negative" if c.startswith("neg-") else "positive",
                grader="regex",
            )
            for c, s in (criteria or {}).items()
        ]
        rb = RewardBreakdown(total=reward, normalized=reward, criteria=crits)
    return Trajectory(
        id=f"{task}#{sample}",
        task_id=task,
        messages=[Message(role="user", content="q")],
        reward=rb,
        info={"sample": sample, "seed": 1000 + sample, "status": status, **info},
    )


Q = "What was Ostionline Networks' revenue in Q2 2021? Cite your source."
RELEASE = "https://ir.ostionline.example/news/2021-q2-results"
RESULTS = f'Results for "Ostionline revenue":\n1. Ostionline Q2 2021 results\n   {RELEASE}\n   Revenue was...'
PAGE = f"Title: Q2 2021 results\nURL: {RELEASE}\n\nTotal revenue was $18.5 billion, up 4.2% from last year."


def episode(
    *calls: tuple[str, dict, str],
    prompt: str = Q,
    task: str = "t",
    sample: int = 0,
    reward: float | None = None,
) -> Trajectory:
    """A trajectory ``task#sample`` from (tool, arguments, observation) calls; a call named ``answer``
    is the report. ``reward``: its normalised reward (None: unjudged)."""
    msgs: list[dict] = [{"role": "user", "content": prompt}]
    for i, (name, args, obs) in enumerate(calls):
        call = {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        msgs.append({"role": "assistant", "content": None, "tool_calls": [call]})
        if name != "answer":
            msgs.append({"role": "tool", "name": name, "tool_call_id": f"c{i}", "content": obs})
    report = next((a["report"] for n, a, _ in calls if n == "answer"), None)
    info = {"status": "answered" if report else "unanswered", "report": report, "sample": sample}
    rb = None if reward is None else RewardBreakdown(total=reward, normalized=reward)
    return Trajectory(id=f"{task}#{sample}", task_id=task, messages=msgs, reward=rb, info=info)


def researching(**kw: Any) -> Trajectory:
    """Searches the question's subject, opens the release its search listed, states the figure on it:
    1/1 on every share."""
    return episode(
        ("search", {"query": "Ostionline Networks revenue Q2 2021"}, RESULTS),
        ("open_url", {"url": RELEASE}, PAGE),
        ("answer", {"report": f"Revenue was $18.5 billion \\cite{{{RELEASE}}}."}, ""),
        **kw,
    )


def recalling(**kw: Any) -> Trajectory:
    """Searches a training company, opens a URL no tool printed, states a figure no opened page
    holds: 0/1 on every share."""
    return episode(
        ("search", {"query": "Zelexmark Networks revenue Q2 2021"}, "Results: nothing about it"),
        ("open_url", {"url": "https://ir.zelexmark.example/news/2021-q2-results"}, PAGE),
        ("answer", {"report": "Revenue was $21.7 billion."}, ""),
        **kw,
    )


def wandering(**kw: Any) -> Trajectory:
    """Two searches (one names the subject), opens the listed release, never answers: searches 1/2,
    URLs 1/1, no answer to count."""
    return episode(
        ("search", {"query": "revenue Q2 2021"}, "no results"),
        ("search", {"query": "Ostionline"}, RESULTS),
        ("open_url", {"url": RELEASE}, PAGE),
        **kw,
    )
