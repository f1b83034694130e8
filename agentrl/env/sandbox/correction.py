r"""The ``correction`` family of multi-source tasks: a figure later corrected by a filing.

A company restates one quarter's net income in an amended quarterly report (a Form 10-Q/A on its
investor site), dated after the year's annual report: the amendment prints the restated figure and
names the one first reported, which the results release, the 10-Q and the news still print. The
task, dated after the amendment, asks for the quarter's net income "by its latest filings"; the
report must give the restated figure, say it replaces the original one, and cite the amendment.

Net income is the figure restated because nothing else derives from it: revenue sums into the
full year (the Q4 release, the annual report) and the multi-source families ask for revenue and
segment revenue, so a restated revenue would contradict other pages and tasks. The quarter is one
that no other task asks for, with the figure first reported, at a date on or after the amendment
(a task dated before it is right: the clock hides the amendment). The restated figure is printed
on no other page about the quarter or its year, so only the amendment supports it.

The rubric follows the other multi-source families (best report 2.5; partial research at most
0.04 normalised): the restated and the original figure (0.1 each, ``opened: true``); that the
figure was revised, with the original introduced as such (1.3, requires both figures); honest
citations (``cited_source``, 0.5, requires both figures) and a citation of the amendment (0.5,
requires the restated figure, so only an agent that opened the amendment earns it); and −1.0 for
stating the original figure as the answer (in a sentence with no word that marks it as revised or
first reported). Reading the release alone earns the original figure's share, 0.04.

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
from agentrl.env.sandbox.world import Company, Quarter, money, poss

__all__ = ["FAMILY", "make_corrections", "restated_id"]

FAMILY = "correction"
_TRIES = 16
_MONEY = re.compile(r"\$\d+(?:\.\d+)? (?:billion|trillion)")
#: Words that mark a figure as revised or superseded in the sentence that gives it.
_REVISED = r"\b(?:restat|revis|correct|amend)\w*"
_OLD = (
    r"\b(?:original(?:ly)?|initial(?:ly)?|previous(?:ly)?|prior|earlier|first[\s-]+(?:reported|published|"
    r"released|stated|given)|replac(?:e[ds]?|ing)|supersed(?:e[ds]?|ing)|instead\s+of|from)\b"
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
    return {m.group(0) for i in ids if i in pages for m in _MONEY.finditer(pages[i]["body"])}


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


def _amendment(c: Company, qt: Quarter, original: str, restated: str, day: dt.date) -> dict[str, Any]:
    """The amended quarterly report: the restated figure and the one it replaces come first, so
    they are on the page's first screen."""
    text = (
        f"{c.name.upper()}\nFORM 10-Q/A (AMENDMENT NO. 1)\nQUARTERLY REPORT ({qt.label})\n\n"
        f"Explanatory note\nThis amendment restates net income for {qt.label}. Net income for "
        f"{qt.label}, as restated: {restated}. It replaces the {original} first reported in our "
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
    old = fig_re(original)
    tok = rf"(?:(?!{_END}|{_OLD}|{_REVISED}).)"
    crit: list[dict[str, Any]] = [
        {"id": "restated", "text": f"Gives the restated net income: {restated}, as printed in a page it opened.",
         "weight": 0.1, "grader": {**figure_grader(restated), "opened": True}},
        {"id": "original", "text": f"Names the figure first reported: {original}, as printed in a page it opened.",
         "weight": 0.1, "grader": {**figure_grader(original), "opened": True}},
        {"id": "revised", "weight": 1.3, "requires": ["restated", "original"],
         "text": f"Says the figure was revised, giving {original} as the figure first reported.",
         "grader": {"type": "regex", "pattern": rf"(?is)^(?=.*?{_REVISED})(?=.*?{_OLD}[^.;]{{0,40}}?{old})"}},
        {"id": "citation", "weight": 0.5, "requires": ["restated", "original"],
         "text": "Cites, in \\cite{} format, for each figure a page it opened that prints it.",
         "grader": {"type": "cited_source", "sources": srcs}},
        {"id": "cites_amendment", "weight": 0.5, "requires": ["restated"],
         "text": "Cites the amended filing that restates the figure.",
         "grader": {"type": "regex", "pattern": r"(?i)\\cite\{[^}]*(?:" + re.escape(page["id"]) + "|"
                    + re.escape(page["url"].removeprefix("https://")) + ")"}},
        {"id": "superseded", "kind": "negative", "weight": -1.0,
         "text": f"States the superseded figure {original} as the quarter's net income.",
         "grader": {"type": "regex",
                    "pattern": rf"(?is)(?:^|(?<=[.!?;]\s)|(?<=\n)){tok}*?{old}{tok}*(?:{_END}|$)"}},
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
    page = _amendment(c, qt, original, restated, day)
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
