r"""Sandbox tasks: questions about the world with ground truth and a deterministic rubric.

Four families: a quarter's figure, a full year's revenue, and two time traps — summarising a year
that is not over at the task date (only the latest quarter is reported), and asking for a quarter
whose results are not out yet. Every rubric has the same shape: accuracy (1.0), period/temporal
(1.0), citation (0.5), and a negative criterion for stating a rumoured or predicted figure
(-1.0), so the best report scores 2.5.

No reward without research: ``accuracy`` is a ``figure`` grader (the asked figure, found in a tool
result, and no spray of other figures near it); ``citation`` is a ``cited_source`` grader (each
``\cite{}`` names a page the agent opened that prints the cited figure) and requires accuracy;
``temporal`` requires accuracy, and on the traps also the citation ("not yet published" counts
only together with the latest reported figure and its source).

The ground truth's ``query`` and ``report`` are what the scripted oracle writes, and so what a
warm start imitates; they are written to be *copied*, which is what transfers to companies a model
never saw: the query is the question's own words (company, metric, period) plus "results", and a
report repeats the official release's sentence that prints the figure and cites the URL of the
page it opened (``<URL>``; ``<CITE>`` is the page's cite key, for suites written that way).
"""

from __future__ import annotations

import datetime as dt
import random
import re
from typing import Any

from agentrl.env.sandbox.pages import ORDINAL, source_ids
from agentrl.env.sandbox.world import YEARS, Company, Quarter, money, poss

__all__ = [
    "MAX_SCORE",
    "NOT_YET",
    "fig_re",
    "figure_grader",
    "make_tasks",
    "official",
    "quarter_distractors",
    "rumor_criteria",
    "sources",
]

MAX_SCORE = 2.5
NOT_YET = r"\b(?:not\s+(?:yet\s+)?(?:been\s+)?(?:published|released|reported|available|out)|not\s+yet)\b"


def fig_re(text: str) -> str:
    """A regex matching a printed figure such as ``$12.3 billion`` (optional space after ``$``)."""
    return r"\$\s?" + re.escape(text[1:]).replace(r"\ ", r"\s*")


def figure_grader(figure: str) -> dict[str, Any]:
    """The ``figure`` grader of a printed amount such as ``$12.3 billion``."""
    value, unit = figure.removeprefix("$").split(" ", 1)
    return {"type": "figure", "value": float(value), "unit": unit, "tolerance": 0.001}


def rumor_criteria(figures: set[str]) -> list[dict[str, Any]]:
    """The negative criterion for stating any of ``figures`` (predictions, rumours) as fact: one
    criterion, or none when there is no such figure."""
    bad = sorted(figures)
    if not bad:
        return []
    return [
        {
            "id": "rumor",
            "kind": "negative",
            "weight": -1.0,
            "text": "States a rumoured or predicted figure as fact.",
            "grader": {"type": "regex", "pattern": "|".join(fig_re(d) for d in bad)},
        }
    ]


def sources(pages: dict[str, dict[str, Any]], ids: list[str]) -> dict[str, str]:
    """Cite key → URL of the pages about the task, so that ``\\cite{<id>}`` names the page."""
    return {i: pages[i]["url"] for i in sorted(set(ids)) if i in pages}


def _rubric(
    task_id: str,
    prompt: str,
    figure: str,
    acc_text: str,
    period_re: str,
    period_text: str,
    distractors: list[str],
    sources: dict[str, str],
    trap: bool = False,
) -> dict[str, Any]:
    crit: list[dict[str, Any]] = [
        {
            "id": "accuracy",
            "text": acc_text + " It is the one figure given for it, as found in the sources opened.",
            "weight": 1.0,
            "grader": figure_grader(figure),
        },
        {
            "id": "temporal",
            "text": period_text,
            "weight": 1.0,
            "grader": {"type": "regex", "pattern": period_re},
            "requires": ["accuracy", "citation"] if trap else ["accuracy"],
        },
        {
            "id": "citation",
            "text": "Cites, in \\cite{} format, a page it opened that prints the figure cited.",
            "weight": 0.5,
            "grader": {"type": "cited_source", "sources": sources},
            "requires": ["accuracy"],
        },
    ]
    crit += rumor_criteria({d for d in distractors if d != figure})
    return {
        "id": task_id,
        "version": 1,
        "description": prompt,
        "mapping": "strict",
        "aggregation": "weighted_sum",
        "criteria": crit,
    }


def _src(doc_id: str, url: str, day: dt.date, figure: str, kind: str) -> dict[str, Any]:
    return {"id": doc_id, "url": url, "date": day.isoformat(), "figure": figure, "kind": kind}


def release_query(c: Company, qt: Quarter) -> str:
    """The follow-up search for a quarter's official release, in the words of its headline (the Q4
    release holds the full year): what a researcher searches when the first search missed it."""
    return f"{c.name} announces {ORDINAL[qt.q].lower()} quarter {qt.year} results"


def official(c: Company, qt: Quarter, figure: str) -> dict[str, Any]:
    return _src(
        source_ids(c, qt)["official"],
        f"https://ir.{c.slug}.example/news/{qt.year}-q{qt.q}-results",
        qt.release,
        figure,
        "official",
    )


def quarter_distractors(
    c: Company, qt: Quarter, pages: dict[str, dict[str, Any]], metric: str
) -> list[dict[str, Any]]:
    ids = source_ids(c, qt)
    out = [_src(ids["gossip"], pages[ids["gossip"]]["url"], qt.gossip, money(qt.gossip_revenue), "gossip")]
    if metric != "net income":
        pred = qt.preview_revenue if metric == "revenue" else qt.preview_segment
        out.append(_src(ids["preview"], pages[ids["preview"]]["url"], qt.preview, money(pred), "preview"))
    return out


def _task(
    tid: str,
    family: str,
    prompt: str,
    day: dt.date,
    rubric: dict[str, Any],
    query: str,
    official: dict[str, Any],
    distractors: list[dict[str, Any]],
    report: str,
    rumor_report: str,
    followup_query: str,
) -> dict[str, Any]:
    return {
        "id": tid,
        "prompt": prompt,
        "date": day.isoformat(),
        "family": family,
        "rubric": rubric,
        "ground_truth": {
            "query": query,
            # what a researcher searches next when the first search does not list the source
            "followup_query": followup_query,
            "official": official,
            # a prediction that happens to print the true figure is not a distractor
            "distractors": [d for d in distractors if d["figure"] != official["figure"]],
            "report": report,
            "rumor_report": rumor_report,
            "max_score": MAX_SCORE,
        },
    }


def _quarterly(c: Company, qt: Quarter, metric: str, rng: random.Random, pages: dict) -> dict[str, Any]:
    value = {"revenue": qt.revenue, "segment": qt.segment_revenue, "net income": qt.net_income}[metric]
    mlabel = f"{c.segment} revenue" if metric == "segment" else metric
    fig = money(value)
    tid = f"{c.slug}-q{qt.q}-{qt.year}-{metric.replace(' ', '-')}"
    prompt = f"What was {poss(c.name)} {mlabel} in Q{qt.q} {qt.year}? Cite your source."
    day = qt.release + dt.timedelta(days=rng.randint(3, 150))
    dis = quarter_distractors(c, qt, pages, "revenue" if metric == "revenue" else metric)
    period_re = rf"(?i)\bQ{qt.q}\s+{qt.year}\b|\b{ORDINAL[qt.q]}\s+quarter\s+(?:of\s+)?{qt.year}\b"
    rubric = _rubric(
        tid,
        prompt,
        fig,
        f"Gives {mlabel} for {qt.label}: {fig}.",
        period_re,
        f"Labels the figure as {qt.label}.",
        [d["figure"] for d in dis],
        sources(pages, [*source_ids(c, qt).values()]),
    )
    report = {
        "revenue": f"Total revenue for {qt.label} was <FIGURE> \\cite{{<URL>}}.",
        "segment": f"{c.segment} revenue was <FIGURE> in {qt.label} \\cite{{<URL>}}.",
        "net income": f"Net income for {qt.label} was <FIGURE> \\cite{{<URL>}}.",
    }[metric]
    return _task(
        tid,
        "quarterly",
        prompt,
        day,
        rubric,
        f"{poss(c.name)} {mlabel} in {qt.label} results",
        official(c, qt, fig),
        dis,
        report,
        report,
        release_query(c, qt),
    )


def _annual(c: Company, year: int, rng: random.Random, pages: dict) -> dict[str, Any]:
    q4 = c.quarter(year, 4)
    fig = money(c.full_year(year))
    tid = f"{c.slug}-fy-{year}-revenue"
    prompt = f"What was {poss(c.name)} full-year {year} revenue? Cite your source."
    day = q4.release + dt.timedelta(days=rng.randint(3, 120))
    pid, gid = f"preview-{c.slug}-fy-{year}", f"gossip-{c.slug}-fy-{year}"
    dis = [
        _src(pid, pages[pid]["url"], c.fy_preview[year][0], money(c.fy_preview[year][1]), "preview"),
        _src(gid, pages[gid]["url"], c.fy_gossip[year][0], money(c.fy_gossip[year][1]), "gossip"),
    ]
    period_re = (
        rf"(?i)\b(?:full[- ]year|fiscal(?:\s+year)?|annual)\s+{year}\b|\b{year}\s+(?:full[- ]year|annual)\b"
    )
    rubric = _rubric(
        tid,
        prompt,
        fig,
        f"Gives full-year {year} revenue: {fig}.",
        period_re,
        f"Labels the figure as full-year {year}.",
        [d["figure"] for d in dis],
        sources(pages, [*source_ids(c, q4).values(), pid, gid, f"{c.slug}-annual-{year}"]),
    )
    report = f"Full-year {year} revenue was <FIGURE> \\cite{{<URL>}}."
    return _task(
        tid,
        "annual",
        prompt,
        day,
        rubric,
        f"{poss(c.name)} full-year {year} revenue results",
        official(c, q4, fig),
        dis,
        report,
        report,
        release_query(c, q4),
    )


def _summary_trap(c: Company, year: int, n: int, rng: random.Random, pages: dict) -> dict[str, Any]:
    qt, nxt = c.quarter(year, n), c.quarter(year, n + 1)
    day = qt.release + dt.timedelta(days=rng.randint(1, max(1, (nxt.release - qt.release).days - 1)))
    fig = money(qt.segment_revenue)
    tid = f"{c.slug}-{year}-summary-{day.isoformat()}"
    prompt = f"Summarise {poss(c.name)} {year} financial results, focusing on {c.segment} revenue."
    dis = quarter_distractors(c, qt, pages, "segment")
    pid, gid = f"preview-{c.slug}-fy-{year}", f"gossip-{c.slug}-fy-{year}"
    dis += [
        _src(pid, pages[pid]["url"], c.fy_preview[year][0], money(c.fy_preview[year][1]), "preview"),
        _src(gid, pages[gid]["url"], c.fy_gossip[year][0], money(c.fy_gossip[year][1]), "gossip"),
    ]
    period_re = rf"(?is)^(?=.*\bQ{n}\s+{year}\b)(?=.*{NOT_YET})"
    rubric = _rubric(
        tid,
        prompt,
        fig,
        f"Gives {c.segment} revenue for {qt.label}: {fig}.",
        period_re,
        f"Says the full-year {year} results are not out yet at {day} and labels the figures as "
        f"{qt.label}, not full year.",
        [d["figure"] for d in dis],
        sources(pages, [*source_ids(c, qt).values(), pid, gid]),
        trap=True,
    )
    report = (
        f"Full-year {year} results are not published yet. The latest are for {qt.label}: "
        f"{c.segment} revenue was <FIGURE> \\cite{{<URL>}}."
    )
    rumor = f"Full-year {year} {c.segment} revenue was <FIGURE> \\cite{{<URL>}}."
    return _task(
        tid,
        "trap_year",
        prompt,
        day,
        rubric,
        f"{poss(c.name)} {year} financial results",
        official(c, qt, fig),
        dis,
        report,
        rumor,
        release_query(c, qt),
    )


def _quarter_trap(
    c: Company, asked: Quarter, prev: Quarter, rng: random.Random, pages: dict
) -> dict[str, Any]:
    span = max(1, (asked.release - prev.release).days - 1)
    day = prev.release + dt.timedelta(days=rng.randint(1, span))
    fig = money(prev.segment_revenue)
    tid = f"{c.slug}-q{asked.q}-{asked.year}-notyet-{day.isoformat()}"
    prompt = f"What was {poss(c.name)} {c.segment} revenue in Q{asked.q} {asked.year}?"
    dis = quarter_distractors(c, asked, pages, "segment")
    period_re = rf"(?is)^(?=.*\bQ{asked.q}\s+{asked.year}\b)(?=.*{NOT_YET})(?=.*\bQ{prev.q}\s+{prev.year}\b)"
    rubric = _rubric(
        tid,
        prompt,
        fig,
        f"Gives the latest reported {c.segment} revenue ({prev.label}): {fig}.",
        period_re,
        f"Says the {asked.label} results are not out yet at {day} and labels the figure "
        f"given as {prev.label}.",
        [d["figure"] for d in dis],
        sources(pages, [*source_ids(c, prev).values(), *source_ids(c, asked).values()]),
        trap=True,
    )
    report = (
        f"{asked.label} results are not published yet. The latest are for {prev.label}: "
        f"{c.segment} revenue was <FIGURE> \\cite{{<URL>}}."
    )
    rumor = f"{c.segment} revenue was <FIGURE> in {asked.label} \\cite{{<URL>}}."
    return _task(
        tid,
        "trap_quarter",
        prompt,
        day,
        rubric,
        f"{poss(c.name)} {c.segment} revenue in {asked.label} results",
        official(c, prev, fig),
        dis,
        report,
        rumor,
        release_query(c, prev),
    )


def make_tasks(c: Company, pages: dict[str, dict[str, Any]], rng: random.Random) -> list[dict[str, Any]]:
    """Eleven tasks about one company (5 quarterly, 2 annual, 3 year traps, 1 quarter trap)."""
    tasks = []
    picks = rng.sample(range(len(c.quarters) - 1), 5)
    metrics = ["revenue", "segment", "net income"]
    for i, idx in enumerate(sorted(picks)):
        tasks.append(_quarterly(c, c.quarters[idx], metrics[i % 3], rng, pages))
    for year in rng.sample(YEARS[:-1], 2):
        tasks.append(_annual(c, year, rng, pages))
    for year in rng.sample(YEARS[1:], 3):
        tasks.append(_summary_trap(c, year, rng.randint(1, 3), rng, pages))
    idx = rng.randint(4, len(c.quarters) - 1)
    tasks.append(_quarter_trap(c, c.quarters[idx], c.quarters[idx - 1], rng, pages))
    return tasks
