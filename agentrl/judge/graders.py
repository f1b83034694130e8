"""Deterministic graders: regex, contains, not_contains and number. No LLM call, no network.

Each grader answers one question about the report ("does it match?") with an enumerated verdict:
``Fully Satisfied`` when the criterion's condition holds, ``Not Satisfied`` otherwise. For a
negative criterion the condition describes the flaw, so ``Fully Satisfied`` means the flaw is
present; the mapping in ``agentrl.judge.score`` turns that into the (negative) contribution.
"""

from __future__ import annotations

import re

from agentrl.errors import JudgeError
from agentrl.judge.bounds import MAX_REPORT_CHARS, Budget, Undecided, bounded_search, worst_verdict
from agentrl.judge.evidence import Evidence, evidence_holds
from agentrl.judge.rubric import (
    EVIDENCE_GRADERS,
    UNIT_WORDS,
    ContainsGrader,
    Criterion,
    NotContainsGrader,
    NumberGrader,
    RegexGrader,
    Rubric,
)
from agentrl.judge.score import breakdown, map_verdict
from agentrl.trajectory import CriterionScore, RewardBreakdown

__all__ = ["find_numbers", "grade_criterion", "score_deterministic"]

# A number (with optional thousands separators and decimals) followed by an optional scale word.
# The scale word must end at a word boundary so that "12.3 bits" is not read as 12.3 billion.
_NUMBER = re.compile(
    r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
    r"(?:\s*(?P<unit>thousand|million|billion|trillion|mln|bln|mn|mm|bn|tn|k|m|b|t)(?:(?<=[a-z]{4})s)?(?![A-Za-z]))?",
    re.IGNORECASE,
)


def find_numbers(text: str) -> list[float]:
    """Every number in ``text``, scaled by its unit word: ``"$12.3 billion"`` → ``12.3e9``."""
    out: list[float] = []
    for m in _NUMBER.finditer(text):
        unit = (m.group("unit") or "").lower()
        digits = m.group(0)[: m.start("unit") - m.start()] if m.group("unit") else m.group(0)
        try:
            value = float(digits.replace(",", "").strip())
        except ValueError:
            continue
        out.append(value * UNIT_WORDS[unit])
    return out


def _found(g: ContainsGrader, report: str) -> list[bool]:
    """For each of the grader's strings, whether the report contains it."""
    items = [g.text] if isinstance(g.text, str) else list(g.text)
    hay = report if g.case_sensitive else report.casefold()
    return [(s if g.case_sensitive else s.casefold()) in hay for s in items]


def _holds(criterion: Criterion, report: str, budget: Budget, evidence: Evidence | None = None) -> bool:
    g = criterion.grader
    if g.type in EVIDENCE_GRADERS:  # what the agent did: agentrl.judge.evidence (linear-time patterns)
        return evidence_holds(g, report, evidence)  # type: ignore[arg-type]
    if isinstance(g, RegexGrader):  # the one grader whose time is not linear in the report
        return bounded_search(g.pattern, g.ignore_case, report, budget)
    if isinstance(g, NotContainsGrader):  # before ContainsGrader: it is a subclass
        return not any(_found(g, report))
    if isinstance(g, ContainsGrader):
        found = _found(g, report)
        return all(found) if g.match == "all" else any(found)
    if isinstance(g, NumberGrader):
        target = g.value * UNIT_WORDS[g.unit]
        tol = max(g.abs_tolerance * UNIT_WORDS[g.unit], g.tolerance * abs(target))
        return any(abs(x - target) <= tol for x in find_numbers(report))
    raise JudgeError(f"criterion {criterion.id!r} needs the LLM judge (grader {g.type!r})")


def grade_criterion(
    criterion: Criterion,
    report: str,
    mapping: str,
    *,
    rubric_hash: str | None = None,
    budget: Budget | None = None,
    evidence: Evidence | None = None,
) -> CriterionScore:
    """Grade one deterministic criterion: ``Fully Satisfied`` if its condition holds, else ``Not Satisfied``.

    ``budget`` is the report's regex matching time (``bounds.Budget``, shared by its criteria;
    default: a fresh one). A criterion the graders cannot decide (time
    out, or a report over ``MAX_REPORT_CHARS``) gets its worst verdict, the reason in ``reasoning``.
    ``evidence`` (``agentrl.judge.evidence.evidence_of(trajectory)``) is what evidence graders read;
    without it the agent opened nothing.
    """
    reasoning = None
    try:
        if len(report) > MAX_REPORT_CHARS:
            raise Undecided(
                f"the report has {len(report)} characters; graders read at most {MAX_REPORT_CHARS}"
            )
        holds = _holds(criterion, report, Budget() if budget is None else budget, evidence)
        verdict = "Fully Satisfied" if holds else "Not Satisfied"
    except Undecided as e:
        verdict = worst_verdict(criterion.kind)
        reasoning = f"undecided, scored as the worst verdict: {e}"
    return CriterionScore(
        id=criterion.id,
        verdict=verdict,
        score=map_verdict(verdict, criterion.kind, mapping),
        weight=criterion.weight,
        kind=criterion.kind,
        grader=criterion.grader.type,
        reasoning=reasoning,
        rubric_hash=rubric_hash,
    )


def score_deterministic(
    rubric: Rubric,
    report: str,
    *,
    prompt: str = "",
    time_limit_s: float | None = None,
    evidence: Evidence | None = None,
) -> RewardBreakdown:
    """Score a report against a rubric whose criteria are all deterministic (synchronous, no I/O).

    ``evidence`` is the episode's (``evidence_of(trajectory)``), read by evidence graders. ``prompt``
    is accepted for symmetry with the LLM judge and unused by the graders. The regex criteria share
    ``time_limit_s`` (default ``bounds.REPORT_TIME_LIMIT_S``). Raises ``JudgeError`` when a
    criterion needs the LLM judge.
    """
    del prompt
    llm = [c.id for c in rubric.criteria if c.is_llm]
    if llm:
        raise JudgeError(f"rubric {rubric.id!r} needs the LLM judge for criteria {', '.join(llm)}")
    h, budget = rubric.content_hash, Budget(time_limit_s)
    return breakdown(
        rubric,
        [
            grade_criterion(c, report, rubric.mapping, rubric_hash=h, budget=budget, evidence=evidence)
            for c in rubric.criteria
        ],
    )
