"""Bounds on deterministic grading: a time limit per report and a cap on the report's length.

A rubric's regular expressions run on text the policy wrote, so a pattern with catastrophic
backtracking (``(a|a)*$``) would let a 40-character report stall a rollout or a training step.
Regex graders therefore run on the third-party ``regex`` engine (already a dependency of
transformers), whose ``search`` takes a ``timeout``; Python's ``re`` has none. Linear-time engines
(RE2) were not chosen because they drop lookarounds, which shipped rubrics use.

The budget counts matching only: compiling a rubric's pattern is the rubric's cost (bounded by the
pattern's length, and cached), so a report's verdicts do not depend on whether its patterns were
compiled before, or on a busy machine's compile times (an oracle once lost a criterion that way).

When a grader cannot decide (its match ran out of the report's time budget, or the report is
longer than ``MAX_REPORT_CHARS``), the criterion gets its *worst* verdict for the report: a
positive criterion is ``Not Satisfied``, a negative one (a flaw) is ``Fully Satisfied``, with the
reason in ``reasoning``. A report can then never gain by making a grader give up: a penalty it
times out still applies, and a quality it times out is not credited.
"""

from __future__ import annotations

import functools
import time

import regex

__all__ = [
    "MAX_REPORT_CHARS",
    "REPORT_TIME_LIMIT_S",
    "Budget",
    "Undecided",
    "bounded_search",
    "compile_pattern",
    "worst_verdict",
]

#: Seconds of regex matching one report may use across all its regex criteria.
REPORT_TIME_LIMIT_S = 1.0
#: Characters of a report the deterministic graders read; a longer report is not graded by them.
MAX_REPORT_CHARS = 50_000


class Undecided(Exception):
    """A grader could not decide within its bounds; ``str(e)`` says why."""


class Budget:
    """Seconds of regex matching one report may still use, shared by its criteria."""

    def __init__(self, limit_s: float | None = None) -> None:
        self.left = REPORT_TIME_LIMIT_S if limit_s is None else float(limit_s)


@functools.lru_cache(maxsize=16384)
def compile_pattern(pattern: str, ignore_case: bool) -> regex.Pattern[str]:
    """A rubric pattern compiled for the ``regex`` engine (re-compatible ``VERSION0`` syntax).

    Cached: sandbox suites hold thousands of patterns, more than the engine's own cache keeps.
    """
    return regex.compile(pattern, regex.VERSION0 | (regex.IGNORECASE if ignore_case else 0))


def bounded_search(pattern: str, ignore_case: bool, text: str, budget: Budget) -> bool:
    """Whether ``pattern`` matches somewhere in ``text``, decided within ``budget.left`` seconds of
    matching (compiling the pattern is not counted); the time the match took is taken from
    ``budget``. Raises ``Undecided`` when the budget runs out first.
    """
    compiled = compile_pattern(pattern, ignore_case)
    if budget.left <= 0:
        raise Undecided("the report's regex time budget was already spent")
    t0 = time.monotonic()
    try:
        return compiled.search(text, timeout=budget.left) is not None
    except TimeoutError:
        # the engine's clock said the budget is spent, whatever ours measured around the call (a hair
        # less on a busy machine, which let every later criterion start a match)
        budget.left = 0.0
        raise Undecided(f"regex {pattern!r} ran out of the report's time budget") from None
    finally:
        budget.left = max(budget.left - (time.monotonic() - t0), 0.0)


def worst_verdict(kind: str) -> str:
    """The verdict that gives the report the least: ``Fully Satisfied`` for a negative criterion
    (the flaw counts) and ``Not Satisfied`` for a positive one (the quality does not)."""
    return "Fully Satisfied" if kind == "negative" else "Not Satisfied"
