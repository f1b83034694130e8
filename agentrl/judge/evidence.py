"""Evidence graders: they grade what the agent did in the episode, not only what it wrote.

``evidence_of(trajectory)`` reads the episode's tool results off its messages: each tool message
that answers a call of the assistant (matched by ``tool_call_id``) and is not an error. Pages are
the results of ``open_url`` calls, named by the URL asked for and the ``URL:`` line the page
shows. Every scoring path (the env at the answer, ``agentrl judge``, replay) builds the evidence
with this one function from the same messages, so they agree.

Two graders use it (their schemas are in ``agentrl.judge.rubric``):

- ``figure``: the report states the asked figure, states no other figure near it that the agent
  never saw (a spray of guesses), and, when ``sourced``, the figure appears in a tool result (with
  ``opened``, on a page the agent opened);
- ``cited_source``: every ``\\cite{key}`` names a page opened in this episode, and that page
  prints the figures the citation is attached to.

The patterns here are linear-time (no nested quantifiers), so a hostile report cannot stall them.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from agentrl.judge.rubric import UNIT_WORDS, CitedSourceGrader, FigureGrader
from agentrl.trajectory import Message, Trajectory
from agentrl.trajectory.tools import tool_arg, tools_with_role

__all__ = [
    "NO_EVIDENCE",
    "Evidence",
    "Observation",
    "cite_keys",
    "cited_source_holds",
    "evidence_holds",
    "evidence_of",
    "figure_holds",
    "figures",
    "normalize_url",
    "prints_figure",
]

# A number with an optional currency sign before it and an optional scale word after it.
_NUM = re.compile(
    r"(?P<cur>[$€£¥])?[ \t]?(?<![\w.,])(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)"
    r"(?:[ \t]?(?P<unit>thousand|million|billion|trillion|mln|bln|mn|mm|bn|tn|k|m|b|t)"
    r"(?:(?<=[a-z]{4})s)?(?![A-Za-z]))?",
    re.IGNORECASE,
)
_CITE = re.compile(r"\\cite\{([^{}]*)\}")
_URL_LINE = re.compile(r"^URL: (\S+)", re.MULTILINE)
#: Two printed figures are the same figure when they differ by at most this fraction (rounding).
SAME = 0.005


@dataclass(frozen=True)
class Number:
    """One number read from text: its value (scaled by its unit word) and whether it is an amount."""

    value: float
    amount: bool  # a currency sign or a scale word: "$12.3 billion", "12.3bn"
    year: bool  # a bare 4-digit year, 1900-2100


def _numbers(text: str) -> list[Number]:
    out: list[Number] = []
    for m in _NUM.finditer(text):
        digits, unit = m.group("num"), (m.group("unit") or "").lower()
        try:
            value = float(digits.replace(",", "")) * UNIT_WORDS[unit]
        except (ValueError, KeyError):
            continue
        amount = bool(m.group("cur") or unit)
        year = not amount and len(digits) == 4 and 1900 <= value <= 2100
        out.append(Number(value, amount, year))
    return out


def figures(text: str) -> list[float]:
    """The amounts in ``text`` (a currency sign or a scale word), scaled: ``"$12.3 billion"`` → 1.23e10."""
    return [n.value for n in _numbers(text) if n.amount]


def normalize_url(url: str) -> str:
    """A URL compared loosely: no scheme, no ``www.``, lower-case host, no fragment or trailing slash."""
    u = url.strip().strip("<>").split("#", 1)[0]
    u = re.sub(r"^[A-Za-z][A-Za-z0-9+.-]*://", "", u)
    host, sep, rest = u.partition("/")
    host = host.lower().removeprefix("www.")
    return (host + sep + rest).rstrip("/")


@dataclass(frozen=True)
class Observation:
    """One tool result the agent saw: the tool, the URLs naming it (``open_url`` only), its text and
    the assistant turn (0-based) whose call it answers (turn credit reads it: ``agentrl.judge.credit``)."""

    tool: str
    urls: frozenset[str]
    text: str
    turn: int = -1


@dataclass(frozen=True)
class Evidence:
    """What the agent saw in one episode: its non-error tool results, in order."""

    observations: tuple[Observation, ...] = ()

    @property
    def pages(self) -> list[Observation]:
        """The pages the agent opened (the results of tools in the ``page`` role: ``open_url``)."""
        return [o for o in self.observations if o.tool in tools_with_role("page")]

    def opened(self, key: str, sources: dict[str, str]) -> list[Observation]:
        """The opened pages a cite key names: by URL, or through ``sources`` (key → URL)."""
        names = {normalize_url(key)}
        if key in sources:
            names.add(normalize_url(sources[key]))
        return [p for p in self.pages if p.urls & names]

    def seen_numbers(self) -> list[Number]:
        """Every number in the agent's tool results (search snippets and pages)."""
        return [n for o in self.observations for n in _numbers(o.text)]


NO_EVIDENCE = Evidence()


def _is_error(text: str) -> bool:
    return text.lstrip().startswith("Error")


def evidence_of(trajectory: Trajectory | Sequence[Message]) -> Evidence:
    """The tool results of an episode (a ``Trajectory`` or its messages), read off the messages."""
    messages = trajectory.messages if isinstance(trajectory, Trajectory) else trajectory
    calls: dict[str, tuple[str, str, int]] = {}
    turn = -1
    for m in messages:
        if m.role == "assistant":
            turn += 1
            for c in m.tool_calls or []:
                url = None
                if c.function.name in tools_with_role("page"):
                    with contextlib.suppress(ValueError):  # arguments that are not JSON: no URL
                        url = tool_arg(c.function.name, "page", c.function.parsed_arguments())
                calls[c.id] = (c.function.name, url or "", turn)
    out: list[Observation] = []
    for m in messages:
        if m.role != "tool" or (m.tool_call_id or "") not in calls:
            continue
        text = m.text
        if _is_error(text):
            continue
        name, url, at = calls[m.tool_call_id or ""]
        urls: set[str] = set()
        if name in tools_with_role("page"):
            urls = {normalize_url(u) for u in (url, *_URL_LINE.findall(text[:2000])) if u}
        out.append(Observation(name, frozenset(urls), text, at))
    return Evidence(tuple(out))


def _same(a: float, b: float, tol: float) -> bool:
    return abs(a - b) <= tol


def _tol(g: FigureGrader) -> tuple[float, float]:
    target = g.value * UNIT_WORDS[g.unit]
    return target, max(g.abs_tolerance * UNIT_WORDS[g.unit], g.tolerance * abs(target))


def _candidates(numbers: Iterable[Number], amounts_only: bool) -> list[float]:
    return [n.value for n in numbers if (n.amount if amounts_only else not n.year)]


def prints_figure(g: FigureGrader, text: str) -> bool:
    """Whether ``text`` (a tool result) prints the figure ``g`` asks for, up to its tolerances: the
    one test of "a page printed it", shared by the grader and turn credit."""
    target, tol = _tol(g)
    return any(_same(x, target, tol) for x in _candidates(_numbers(text), bool(g.unit)))


def figure_holds(g: FigureGrader, report: str, evidence: Evidence) -> bool:
    """The ``figure`` grader (see ``FigureGrader``)."""
    target, tol = _tol(g)
    stated = _candidates(_numbers(report), bool(g.unit))
    if not any(_same(x, target, tol) for x in stated):
        return False
    seen = sorted(_candidates(evidence.seen_numbers(), bool(g.unit)))
    if g.sourced and not any(_same(x, target, tol) for x in seen):
        return False
    if g.opened and not any(prints_figure(g, p.text) for p in evidence.pages):
        return False  # seen in a search snippet at most: the page that prints it was never opened
    lo, hi = sorted((target / g.band, target * g.band))
    # Another figure for the same quantity (near it) that no tool result gave: a guess, or a spray.
    return not any(lo <= x <= hi and not _same(x, target, tol) and not _in(seen, x) for x in stated)


def _in(sorted_values: list[float], x: float) -> bool:
    """Whether ``x`` is one of ``sorted_values`` up to rounding (binary search: a spray stays cheap)."""
    import bisect

    tol = SAME * abs(x)
    i = bisect.bisect_left(sorted_values, x - tol)
    return i < len(sorted_values) and sorted_values[i] <= x + tol


def cite_keys(report: str) -> list[tuple[int, int, list[str]]]:
    """``(start, end, keys)`` of each ``\\cite{a, b}`` in the report."""
    return [
        (m.start(), m.end(), [k.strip() for k in m.group(1).split(",") if k.strip()])
        for m in _CITE.finditer(report)
    ]


def cited_source_holds(g: CitedSourceGrader, report: str, evidence: Evidence) -> bool:
    """The ``cited_source`` grader (see ``CitedSourceGrader``)."""
    cites = cite_keys(report)
    if not cites:
        return False
    carried, prev = False, 0
    for start, end, keys in cites:
        window, prev = report[prev:start], end
        if not keys:
            return False
        pages: list[Observation] = []
        for k in keys:
            found = evidence.opened(k, g.sources)
            if not found:
                return False  # a citation of a page the agent never opened
            pages.extend(found)
        attached = figures(window)
        if attached:
            printed = sorted(x for p in pages for x in figures(p.text))
            if not all(_in(printed, x) for x in attached):
                return False  # the cited page does not print the figure
            carried = True
    return carried


def evidence_holds(
    criterion_grader: FigureGrader | CitedSourceGrader, report: str, evidence: Evidence | None
) -> bool:
    """Whether an evidence grader's condition holds; no evidence means the agent saw nothing."""
    ev = evidence or NO_EVIDENCE
    if isinstance(criterion_grader, FigureGrader):
        return figure_holds(criterion_grader, report, ev)
    return cited_source_holds(criterion_grader, report, ev)
