"""Warnings about rubrics that validate but probably do not mean what they say.

``rubric_lints`` gives one line per suspect criterion; ``agentrl rubric validate`` prints them after
the criterion's file (the rubric still loads and scores: these are judgement calls, not errors).
Today: a negative criterion whose grader is itself negative (``not_contains``), a double negative
that fires on every report *without* the text, so a clean report is penalised.
"""

from __future__ import annotations

from agentrl.judge.rubric import Rubric

__all__ = ["rubric_lints"]


def rubric_lints(rubric: Rubric) -> list[str]:
    """One warning line per criterion of ``rubric`` that looks inverted, naming it as
    ``criteria[i] (id)``."""
    out = []
    for i, c in enumerate(rubric.criteria):
        if c.kind == "negative" and c.grader.type == "not_contains":
            out.append(
                f"criteria[{i}] ({c.id}): a negative criterion graded not_contains is a double negative: "
                "the flaw counts whenever the text is absent, so every clean report is penalised; grade "
                "the flaw with contains (or make the criterion positive)"
            )
    return out
