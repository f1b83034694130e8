"""Turn credit: the share of an episode's reward that a turn earned by reading a rewarded figure.

An outcome reward is one number at the end of a long episode. With evidence graders the judge also
knows where a rewarded figure came from: a ``figure`` criterion pays only for a figure printed in a
tool result of the episode (with ``opened``, a page the agent opened). ``evidence_turn_credit``
gives, for each assistant turn, the part of the reward that turn earned: for each positive
``figure`` criterion the report satisfied, its contribution (weight × score) goes to the first turn
whose call fetched a result that prints the figure. The rest of the reward stays on the outcome.

What it assumes (docs/training.md, "Turn credit"):

- the credited turn is the first one whose tool result (an opened page when the grader has
  ``opened``; any tool result when it is only ``sourced``) prints the figure: reading is credited,
  not the reasoning or writing that used it, and a later turn that read the same figure again
  earns nothing;
- only ``figure`` criteria are credited: a ``cited_source``, derived (regex, number, LLM) or gated
  criterion pays for the report as a whole and stays on the outcome, and so do negative criteria;
- the credit is in the normalised unit (contribution / Σ positive weights, the ``judge.normalize``
  unit the trainer and the adapters train on by default); a run that trains on the rubric total
  (``normalize: false``) still trains on its total (credit is carved out of the outcome, never
  added: ``agentrl.tokens.Expander``) but the credited shares are then Σ positive weights times smaller.

The credit is a function of the messages, the rubric and the reward alone, so every path that
records a reward (the env at the answer, ``agentrl judge``, re-scoring: ``record_reward``)
computes the same list.
"""

from __future__ import annotations

from agentrl.judge.evidence import Evidence, evidence_of, prints_figure
from agentrl.judge.rubric import FigureGrader, Rubric
from agentrl.trajectory import RewardBreakdown, Trajectory
from agentrl.trajectory.tools import tools_with_role

__all__ = ["TURN_CREDIT", "credited_turn", "evidence_turn_credit"]

#: ``info`` key of a trajectory's turn credit (one float per assistant turn), placed by the expander.
TURN_CREDIT = "turn_credit"


def credited_turn(g: FigureGrader, evidence: Evidence) -> int | None:
    """The first assistant turn (0-based) whose tool result the grader accepts as the figure's
    source and that prints it; None when no tool result does (or the grader asks for no source)."""
    if not (g.opened or g.sourced):
        return None
    for o in evidence.observations:
        if (o.tool in tools_with_role("page") or not g.opened) and o.turn >= 0 and prints_figure(g, o.text):
            return o.turn
    return None


def evidence_turn_credit(
    trajectory: Trajectory, rubric: Rubric, reward: RewardBreakdown | None
) -> list[float]:
    """One float per assistant message of ``trajectory``: the normalised reward each turn earned
    by reading a figure the report was paid for (see the module docstring); all 0 for a reward that
    is missing, a ``judge_error``, or has no positive weight."""
    turns = sum(1 for m in trajectory.messages if m.role == "assistant")
    credit = [0.0] * turns
    if reward is None or reward.status != "ok" or reward.total is None:
        return credit
    positive = sum(c.weight for c in reward.criteria if c.weight > 0)
    if positive <= 0:
        return credit
    graders = {c.id: c.grader for c in rubric.criteria if isinstance(c.grader, FigureGrader)}
    evidence: Evidence | None = None
    for c in reward.criteria:
        g = graders.get(c.id)
        if g is None or c.kind != "positive" or c.weight <= 0 or c.score <= 0:
            continue
        evidence = evidence or evidence_of(trajectory)
        turn = credited_turn(g, evidence)
        if turn is not None and turn < turns:
            credit[turn] += c.weight * c.score / positive
    return credit
