"""The outcome of an episode: which report it gave, and the reward of an episode that gave none.

The env owns the decision (``agentrl.env.ResearchEnv``): the first valid ``answer`` call of a turn
ends the episode and is the report; calls after it are not run; a turn cut at the token limit is
never a report. It records the decision on the trajectory (``info["status"]``, ``info["report"]``),
and every reader (``Trajectory.final_report()``, the judge, replay, explain) reads it back through
``report_of``. The rules that both sides apply live here, once (the first three are defined beside ``Trajectory`` in ``models``, whose
``final_report`` applies them, and re-exported here):

- ``answer_report``: when an ``answer`` call's arguments make a report;
- ``first_answer``: the first such call of a turn;
- ``unanswered_reward``: no answer → reward 0 with the reason (trainable, unlike a judge error).
"""

from __future__ import annotations

from agentrl.trajectory.models import (
    ANSWERED,
    RUNNING,
    UNANSWERED,
    RewardBreakdown,
    answer_report,
    first_answer,
    report_of,
)

__all__ = [
    "ANSWERED",
    "RUNNING",
    "UNANSWERED",
    "answer_report",
    "first_answer",
    "report_of",
    "unanswered_reward",
]


def unanswered_reward(reason: str | None) -> RewardBreakdown:
    """The reward of an episode that ended without a report: 0, with why it ended."""
    return RewardBreakdown(total=0.0, error=f"no final answer ({reason or 'no answer'})")
