r"""The ``correction`` family of multi-source tasks: a figure later corrected by a filing.

A company restates one quarter's net income in an amended quarterly report (a Form 10-Q/A on its
investor site), dated after the year's annual report: the amendment prints the restated figure and
says it replaces the figure first reported in the results release and the 10-Q, which (like the
news) still print the original. The amendment does not print the original, so no single page
answers the task: dated after the amendment, it asks for the quarter's net income "by its latest
filings" and, if it was revised, the figure first reported; the report must give the restated
figure as the answer, the original as the one first reported, and cite the amendment.

Net income is the figure restated because nothing else derives from it: revenue sums into the
full year (the Q4 release, the annual report) and the multi-source families ask for revenue and
segment revenue, so a restated revenue would contradict other pages and tasks. The quarter is one
that no other task asks for, with the figure first reported, at a date on or after the amendment
(a task dated before it is right: the clock hides the amendment). The restated figure is printed
on no other page about the quarter or its year, so only the amendment supports it.

The rubric follows the other multi-source families (best report 2.5; partial research at most
0.04 normalised): the restated and the original figure (0.1 each, ``opened: true``); ``revised``
(1.3, requires both figures): the restated figure given as the revised one (after "restated",
"revised", … or followed by "(restated)") and the original introduced as first reported ("first
reported", "originally", "from", … before it, or "as first reported", "later restated" after it);
honest citations (``cited_source``, 0.5) and a citation of the amendment (0.5), both requiring both
figures; −1.2 for stating the original as the answer (in a sentence with no word that marks it as
revised or first reported, or introduced as the revised figure: "restated to", "revised …, is");
and −2.5 (all a report can earn) for offering both figures as the answer ("either $1.2 billion or
$1.4 billion"). A swapped or hedged report so earns nothing; reading one page earns its figure's
share, 0.04.

The ground truth's two ``steps`` (the release, then the amendment) let the oracle solve it the way
it solves the other families (``agentrl.policy.oracle``).
"""

from __future__ import annotations

import datetime as dt
import random
import re
from typing import Any

from agentrl.env.sandbox.pages import source_ids
from agentrl.env.sandbox.tasks import (
    MAX_SCORE,
    fig_re,
    figure_grader,
    official,
    quarter_distractors,
    rumor_criteria,
    sources,
)
from agentrl.env.sandbox.world import MONEY, Company, Quarter, money, poss

__all__ = ["FAMILY", "make_corrections", "restated_id"]

FAMILY = "correction"
_TRIES = 16
#: Words that mark a figure as revised or superseded in the sentence that gives it.
_REVISED = r"\b(?:restat|revis|correct|amend)\w*"
#: Words that introduce the figure first reported.
_OLD = (
    r"\b(?:original(?:ly)?|initial(?:ly)?|previous(?:ly)?|prior|earlier|first[\s-]+(?:reported|published|"
    r"released|stated|given)|replac(?:e[ds]?|ing)|supersed(?:e[ds]?|ing)|instead\s+of|from)\b"
)
#: The same, without ``from`` (which may name the release rather than the figure).
_STRONG_OLD = (
    r"\b(?:original(?:ly)?|initial(?:ly)?|previous(?:ly)?|prior|earlier|first[\s-]+(?:reported|published|"
    r"released|stated|given)|replac(?:e[ds]?|ing)|supersed(?:e[ds]?|ing)|instead\s+of)\b"
)
#: After a figure: it is the revised one (``$1.4 billion (restated)``).
_AS_REVISED = r"\s*\(?\s*(?:as\s+)?(?:restat|revis|correct|amend)\w*"
#: After a figure: it is the one first reported (``$1.2 billion as first reported``, ``later restated``).
_AS_OLD = (
    r"[^.;]{0,30}?\b(?:(?:as\s+)?(?:originally|initially|first|previously)\s+(?:reported|published|stated)|"
    r"later\s+(?:restat|revis|correct|amend)\w*)"
)
_END = r"[.!?;](?:\s|$)|\n"


def restated_id(c: Company, qt: Quarter) -> str:
    """The cite key of the amendment that restates ``qt``."""
    return f"{c.slug}-10qa-q{qt.q}-{qt.year}"


def _printed(c: Company, qt: Quarter, pages: dict[str, dict[str, Any]]) -> set[str]:
    """Every amount printed on a page about ``qt`` or its year: what research on the quarter opens.
    (Company-wide, a small company prints nearly every amount near its net income somewhere.)"""
    y = qt.year
    ids = [
        *source_ids(c, qt).values(),
        f"{c.slug}-annual-{y}",
        f"preview-{c.slug}-fy-{y}",
        f"gossip-{c.slug}-fy-{y}",
    ]
    return {m.group(0) for i in ids if i in pages for m in MONEY.finditer(pages[i]["body"])}


def _last_asked(tasks: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    """(URL, figure) → the latest date at which a task answers with that figure from that page
    (one pass: a world has up to 30,000 tasks)."""
    out: dict[tuple[str, str], str] = {}
    for t in tasks:
        gt = t["ground_truth"]
        for s in [s["official"] for s in gt.get("steps", [])] or [gt.get("official") or {}]:
            key = (s.get("url", ""), s.get("figure", ""))
            out[key] = max(out.get(key, ""), t["date"])
    return out


def _amendment(c: Company, qt: Quarter, restated: str, day: dt.date) -> dict[str, Any]:
    """The amended quarterly report: the restated figure comes first, on the page's first screen. It
    names the release it replaces, not the figure: that one is read from the release (or the 10-Q),
    so no single page answers the task."""
    text = (
        f"{c.name.upper()}\nFORM 10-Q/A (AMENDMENT NO. 1)\nQUARTERLY REPORT ({qt.label})\n\n"
        f"Explanatory note\nThis amendment restates net income for {qt.label}. Net income for "
        f"{qt.label}, as restated: {restated}. It replaces the figure first reported in our "
        f"results release of {qt.release.isoformat()} and our Form 10-Q.\nRevenue and {c.segment} "
        "revenue are unchanged.\n\f\nRestatement\nThe amendment corrects the timing of expenses recognised "
        "in the quarter. The rest of the quarterly report is unchanged."
    )
    return {
        "id": restated_id(c, qt),
        "url": f"https://ir.{c.slug}.example/filings/{qt.year}-q{qt.q}-10qa.pdf",
        "title": f"{c.name} Form 10-Q/A for {qt.label}: restated net income",
        "date": day.isoformat(),
        "content_type": "application/pdf",
        "kind": "filing",
        "body": text,
    }


def _restated(rng: random.Random, value: float) -> float:
    """A restated net income 3-20% away from ``value`` (either way), positive."""
    return round(max(0.1, value * (1 + rng.choice((-1, 1)) * rng.uniform(0.03, 0.2))), 1)


def _rubric(tid: str, prompt: str, original: str, restated: str, page: dict, steps: list, srcs: dict) -> dict:
    old, new = fig_re(original), fig_re(restated)
    tok = rf"(?:(?!{_END}|{_OLD}|{_REVISED}).)"
    # the restated figure given as the current one; the original introduced as the one first reported
    current = rf"{_REVISED}[^.;]{{0,40}}?{new}|{new}{_AS_REVISED}"
    first = rf"{_OLD}[^.;]{{0,40}}?{old}|{old}{_AS_OLD}"
    # the original given as the answer: in a sentence with no marker, or introduced as the revised one
    as_answer = (
        rf"(?:^|(?<=[.!?;]\s)|(?<=\n)){tok}*?{old}{tok}*(?:{_END}|$)"
        rf"|{_REVISED}(?:(?!{_STRONG_OLD})[^.;]){{0,40}}?\b(?:to|at|as|is|was|of|now|:)\s*{old}|{old}{_AS_REVISED}"
    )
    # both offered as the answer: "X or Y" (not "Y, or X as first reported")
    gap = rf"(?:(?!{_OLD})[^.;]){{0,30}}?\bor\b(?:(?!{_OLD})[^.;]){{0,30}}?"
    both = rf"{old}{gap}{new}(?!{_AS_REVISED})|{new}{gap}{old}(?!{_AS_OLD})"
    crit: list[dict[str, Any]] = [
        {"id": "restated", "text": f"Gives the restated net income: {restated}, as printed in a page it opened.",
         "weight": 0.1, "grader": {**figure_grader(restated), "opened": True}},
        {"id": "original", "text": f"Names the figure first reported: {original}, as printed in a page it opened.",
         "weight": 0.1, "grader": {**figure_grader(original), "opened": True}},
        {"id": "revised", "weight": 1.3, "requires": ["restated", "original"],
         "text": f"Gives {restated} as the revised net income and {original} as the figure first reported.",
         "grader": {"type": "regex", "pattern": rf"(?is)^(?=.*?(?:{current}))(?=.*?(?:{first}))"}},
        {"id": "citation", "weight": 0.5, "requires": ["restated", "original"],
         "text": "Cites, in \\cite{} format, for each figure a page it opened that prints it.",
         "grader": {"type": "cited_source", "sources": srcs}},
        {"id": "cites_amendment", "weight": 0.5, "requires": ["restated", "original"],
         "text": "Cites the amended filing that restates the figure.",
         "grader": {"type": "regex", "pattern": r"(?i)\\cite\{[^}]*(?:" + re.escape(page["id"]) + "|"
                    + re.escape(page["url"].removeprefix("https://")) + ")"}},
        {"id": "superseded", "kind": "negative", "weight": -1.2,
         "text": f"States the superseded figure {original} as the quarter's net income.",
         "grader": {"type": "regex", "pattern": rf"(?is){as_answer}"}},
        {"id": "both_ways", "kind": "negative", "weight": -2.5,
         "text": f"Offers {original} or {restated} as the answer instead of choosing.",
         "grader": {"type": "regex", "pattern": rf"(?is){both}"}},
    ]  # fmt: skip
    bad = {d["figure"] for s in steps for d in s["distractors"]} - {original, restated}
    crit += rumor_criteria(bad)
    return {"id": tid, "version": 1, "description": prompt, "mapping": "strict",
            "aggregation": "weighted_sum", "criteria": crit}  # fmt: skip


def _correction(
    c: Company, qt: Quarter, restated: str, day: dt.date, rng: random.Random, pages: dict
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The amendment page and its task."""
    original = money(qt.net_income)
    page = _amendment(c, qt, restated, day)
    asked = day + dt.timedelta(days=rng.randint(3, 120))
    tid = f"{c.slug}-q{qt.q}-{qt.year}-net-income-restated"
    prompt = (
        f"What is {poss(c.name)} net income for {qt.label}, by its latest filings? If the figure was "
        "revised after its results release, give the figure first reported too. Cite your sources."
    )
    dis = [
        d for d in quarter_distractors(c, qt, pages, "net income") if d["figure"] not in (original, restated)
    ]
    amended = {
        "id": page["id"],
        "url": page["url"],
        "date": page["date"],
        "figure": restated,
        "kind": "filing",
    }
    # the original 10-Q still prints the figure first reported: the step's trap (what a noisy oracle opens)
    fid = source_ids(c, qt)["filing"]
    stale = {
        "id": fid,
        "url": pages[fid]["url"],
        "date": qt.filing.isoformat(),
        "figure": original,
        "kind": "filing",
    }
    steps = [
        {"query": f"{poss(c.name)} net income in {qt.label} results", "official": official(c, qt, original),
         "distractors": dis},
        {"query": f"{poss(c.name)} {qt.label} net income restated amended filing", "official": amended,
         "distractors": [stale]},
    ]  # fmt: skip
    srcs = sources(pages, [*source_ids(c, qt).values()]) | {page["id"]: page["url"]}
    report = (
        f"{c.name} restated its {qt.label} net income to <FIGURE2> \\cite{{<URL2>}}; the figure first "
        f"reported was <FIGURE1> \\cite{{<URL1>}}."
    )
    task = {
        "id": tid,
        "prompt": prompt,
        "date": asked.isoformat(),
        "family": FAMILY,
        "rubric": _rubric(tid, prompt, original, restated, page, steps, srcs),
        "ground_truth": {"steps": steps, "report": report, "max_score": MAX_SCORE},
    }
    return page, task


def make_corrections(
    companies: list[Company],
    pages: dict[str, dict[str, Any]],
    tasks: list[dict[str, Any]],
    rng: random.Random,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One restatement per company of ``companies`` (one split's): the amendment pages and the
    ``correction`` tasks. ``tasks`` are the world's other tasks: none of them may ask, after an
    amendment, for the figure it replaces. A company gets none when ``_TRIES`` draws found no
    quarter that fits."""
    new_pages: list[dict[str, Any]] = []
    new_tasks: list[dict[str, Any]] = []
    last = _last_asked(tasks)
    for c in companies:
        for _ in range(_TRIES):
            qt = c.quarters[rng.randrange(len(c.quarters))]
            printed = _printed(c, qt, pages)
            restated = money(_restated(rng, qt.net_income))
            after = max(qt.filing, c.annual_report[qt.year])
            day = after + dt.timedelta(days=rng.randint(10, 120))
            release = official(c, qt, money(qt.net_income))
            if restated in printed or last.get((release["url"], release["figure"]), "") >= day.isoformat():
                continue
            page, task = _correction(c, qt, restated, day, rng, pages)
            new_pages.append(page)
            new_tasks.append(task)
            break
    return new_pages, new_tasks
