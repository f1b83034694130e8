"""The outcome of an episode: which report it gave, and the reward of an episode that gave none.

The env owns the decision (``agentrl.env.ResearchEnv``): the first valid ``answer`` call of a turn
ends the episode and is the report; calls after it are not run; a turn cut at the token limit is
never a report. It records the decision on the trajectory (``info["status"]``, ``info["report"]``),
and every reader (``Trajectory.final_report()``, the judge, replay, explain) reads it back through
``report_of``. The rules that both sides apply live here, once:

- ``answer_report``: when an ``answer`` call's arguments make a report;
- ``first_answer``: the first such call of a turn;
- ``unanswered_reward``: no answer → reward 0 with the reason (trainable, unlike a judge error).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentrl.trajectory.models import Message, RewardBreakdown

if TYPE_CHECKING:
    from agentrl.trajectory.models import Trajectory

__all__ = [
    "ANSWERED",
    "RUNNING",
    "UNANSWERED",
    "answer_report",
    "first_answer",
    "report_of",
    "unanswered_reward",
]

#: ``info["status"]`` values written by the env.
ANSWERED, UNANSWERED, RUNNING = "answered", "unanswered", "running"


def answer_report(arguments: Any) -> str | None:
    """The report of an ``answer`` call with these decoded arguments: exactly ``{"report": <string>}``;
    None for anything else (the env answers such a call with an argument error)."""
    if isinstance(arguments, dict) and set(arguments) == {"report"} and isinstance(arguments["report"], str):
        return arguments["report"]
    return None


def first_answer(message: Message) -> tuple[int, str] | None:
    """``(index, report)`` of the first valid ``answer`` call among ``message.tool_calls``, else None."""
    for i, call in enumerate(message.tool_calls or []):
        if call.function.name != "answer":
            continue
        try:
            report = answer_report(call.function.parsed_arguments())
        except ValueError:
            continue
        if report is not None:
            return i, report
    return None


def report_of(trajectory: Trajectory) -> str | None:
    """The episode's report, or None when it gave none.

    A trajectory written by the env carries the env's decision (``info["status"]`` and
    ``info["report"]``), returned as is. For one the env did not write (a hand-built trajectory, an
    older file), the same rule is read off the messages: the first valid ``answer`` call, else the
    first assistant turn without tool calls that was not cut at the token limit.
    """
    info = trajectory.info or {}
    if info.get("status") in (ANSWERED, UNANSWERED, RUNNING):
        report = info.get("report")
        return report if info["status"] == ANSWERED and isinstance(report, str) else None
    for m in trajectory.messages:
        if m.role != "assistant":
            continue
        found = first_answer(m)
        if found is not None:
            return found[1]
        if not m.tool_calls and m.finish_reason != "length":
            return m.text
    return None


def unanswered_reward(reason: str | None) -> RewardBreakdown:
    """The reward of an episode that ended without a report: 0, with why it ended."""
    return RewardBreakdown(total=0.0, error=f"no final answer ({reason or 'no answer'})")
