r"""Multi-source sandbox tasks: questions that no single page answers (``build(long_horizon=True)``).

Three families here, each needing two to four official releases (the fourth, ``correction``, a
figure restated by a later filing, is ``agentrl.env.sandbox.correction``):

- ``growth``: a metric (revenue or the segment's) in the same quarter of two years, and the change
  between them in percent;
- ``compare``: which of two or three companies reported the highest revenue in one quarter, with
  each company's figure;
- ``year_so_far``: every quarter a company has published of a year that is not over at the task
  date (two or three), and that the next quarter is not out yet — its analyst preview may already
  be online, the time trap.

No reward without reading every source: each asked figure is a ``figure`` criterion with
``opened: true`` (printed on a page the agent opened, not only in a search snippet); the citation
criterion (``cited_source``: every ``\cite{}`` names an opened page that prints the figures it is
attached to) and the criterion derived from the figures (the change, the leader, "not yet") each
require every figure. Stating an analyst's prediction or a rumour for an asked quarter is a
negative criterion. The figures share 0.2, the derived criterion is 1.3 and the citation 1.0, so the
best report scores 2.5, as on the single-source families, and reading only some of the sources
earns at most a figure's share (0.1 of 2.5: normalised 0.04). The derived criteria read the
conclusion where it is written: the change with its direction (a sign, or "up"/"down" and their
kin, before the number), the leader as the subject of "highest" with no other company or negation
between them, and "not yet" in the sentence that names the next quarter.

The ground truth holds ``steps``: one search query and official source per figure, in the order the
report gives them, and a report template with ``<FIGURE1>``, ``<URL1>``, ... that the scripted
oracle fills from the sources it opened (``agentrl.policy.oracle``).
"""

from __future__ import annotations

import datetime as dt
import random
import re
from typing import Any

from agentrl.env.sandbox.pages import source_ids
from agentrl.env.sandbox.tasks import (
    MAX_SCORE,
    NOT_YET,
    figure_grader,
    official,
    quarter_distractors,
    rumor_criteria,
    sources,
)
from agentrl.env.sandbox.world import YEARS, Company, Quarter, money, poss

__all__ = ["FAMILIES", "MULTI_VERSION", "hedge_re", "make_multi_tasks", "percent_re"]

#: Every multi-source family (``correction`` is built by ``agentrl.env.sandbox.correction``).
FAMILIES = ("growth", "compare", "year_so_far", "correction")
#: Bumped whenever the multi-source tasks a seed gives change (the sandbox cache keys on it).
MULTI_VERSION = 5
_TRIES = 8


def _billions(figure: str) -> float:
    """The value of a printed figure (``$12.3 billion``, ``$1.2 trillion``) in billions."""
    value, unit = figure.removeprefix("$").split(" ", 1)
    return float(value) * (1000.0 if unit == "trillion" else 1.0)


_UPW = r"\b(?:up|grew|grow(?:n|s|th)?|increas(?:e[ds]?|ing)|r[io]se[ns]?|rising|higher|gain(?:ed|s)?)\b"
_DOWNW = (
    r"\b(?:down|fell|fall(?:en|s|ing)?|declin(?:e[ds]?|ing)|decreas(?:e[ds]?|ing)|dropp?(?:ed|s)?|lower|"
    r"shr[au]nk|los[st])\b"
)
# a direction, then up to 40 characters to the number with no opposite word among them ("fell in
# Q1 but grew 3.3%" is a rise)
_UP = rf"(?:\+\s?|{_UPW}(?:(?!{_DOWNW})[^.%]){{0,40}}?)"
_DOWN = rf"(?:[-\u2212]\s?|{_DOWNW}(?:(?!{_UPW})[^.%]){{0,40}}?)"
#: Both directions offered side by side ("up or down", "rose (or fell)", "increased or maybe
#: decreased", "+/-", "±"), whatever follows.
_SIDE_BY_SIDE = (
    rf"{_UPW}\W*(?:or|/)(?:\W+\w+)?\W*{_DOWNW}|{_DOWNW}\W*(?:or|/)(?:\W+\w+)?\W*{_UPW}"
    r"|\+\s*/\s*[-\u2212]|[-\u2212]\s*/\s*\+|\u00b1"
)


def hedge_re(pct: float) -> str:
    """A regex for a change of ``pct`` percent given both ways: the rise and the fall of its size
    both stated anywhere in the report (``grew 3.3% or fell 3.3%``, ``+3.3% or -3.3%``), or both
    directions offered side by side (``up or down 3.3%``, ``+/-``, ``±``). The direction regex alone
    would pay such a hedge for the direction it happens to name."""
    if round(pct, 1) == 0.0:  # a change of 0.0 needs no direction, so it has none to hedge
        return _SIDE_BY_SIDE
    up, down = percent_re(abs(pct)), percent_re(-abs(pct))
    return rf"\A(?=[\s\S]*?{up})(?=[\s\S]*?{down})|{_SIDE_BY_SIDE}"


def hedge_criterion(pct: float) -> dict[str, Any]:
    """The negative criterion of a change given both ways (``hedge_re``): it takes back the
    derived criterion's weight."""
    return {
        "id": "hedge",
        "kind": "negative",
        "weight": -1.3,
        "text": "Offers both directions for the change (up or down) instead of the one it found.",
        "grader": {"type": "regex", "pattern": hedge_re(pct)},
    }


def percent_re(pct: float) -> str:
    """A regex for a change of ``pct`` percent written to one decimal, give or take 0.1 (rounding),
    with its direction before the number: a sign (``+6.5%``, ``-3.2%``) or a word (``grew 6.5
    percent``, ``fell 3.2%``). A change that rounds to 0.0 needs no direction."""
    near = sorted({f"{abs(round(pct + d, 1)):.1f}" for d in (-0.1, 0.0, 0.1)})
    alts = "|".join(re.escape(x) for x in near)
    number = rf"(?<![\d.])(?:{alts})\s?(?:%|percent\b|per\s+cent\b)"
    if round(pct, 1) == 0.0:
        return number
    return (_UP if pct > 0 else _DOWN) + number


def _step(c: Company, qt: Quarter, figure: str, query: str, pages: dict, metric: str) -> dict[str, Any]:
    dis = [d for d in quarter_distractors(c, qt, pages, metric) if d["figure"] != figure]
    return {"query": query, "official": official(c, qt, figure), "distractors": dis}


def _rubric(
    task_id: str,
    prompt: str,
    figures: list[tuple[str, str]],
    derived: tuple[str, str, str],
    steps: list[dict[str, Any]],
    sources: dict[str, str],
    extra_distractors: list[str] = (),  # type: ignore[assignment]
) -> dict[str, Any]:
    """``figures``: (figure, what it is); ``derived``: (id, text, regex) of the criterion derived
    from them."""
    share = 0.2 / len(figures)
    ids = [f"figure_{k + 1}" for k in range(len(figures))]
    crit: list[dict[str, Any]] = [
        {
            "id": cid,
            "text": f"Gives {what}: {fig}, as printed in a source it opened.",
            "weight": share,
            "grader": {**figure_grader(fig), "opened": True},
        }
        for cid, (fig, what) in zip(ids, figures, strict=True)
    ]
    did, dtext, dre = derived
    crit.append({"id": did, "text": dtext, "weight": 1.3, "grader": {"type": "regex", "pattern": dre},
                 "requires": ids})  # fmt: skip
    crit.append(
        {
            "id": "citation",
            "text": "Cites, in \\cite{} format, for each figure a page it opened that prints it.",
            "weight": 1.0,
            "grader": {"type": "cited_source", "sources": sources},
            "requires": ids,
        }
    )
    asked = {f for f, _ in figures}
    # a prediction that prints a figure asked of another company or quarter is no distractor here
    bad = ({d["figure"] for s in steps for d in s["distractors"]} | set(extra_distractors)) - asked
    crit += rumor_criteria(bad)
    return {"id": task_id, "version": 1, "description": prompt, "mapping": "strict",
            "aggregation": "weighted_sum", "criteria": crit}  # fmt: skip


def _task(tid: str, family: str, prompt: str, day: dt.date, rubric: dict, steps: list, report: str) -> dict:
    return {
        "id": tid,
        "prompt": prompt,
        "date": day.isoformat(),
        "family": family,
        "rubric": rubric,
        "ground_truth": {"steps": steps, "report": report, "max_score": MAX_SCORE},
    }


def _growth(
    c: Company, q: int, year: int, metric: str, rng: random.Random, pages: dict
) -> dict[str, Any] | None:
    a, b = c.quarter(year - 1, q), c.quarter(year, q)
    value = (lambda qt: qt.revenue) if metric == "revenue" else (lambda qt: qt.segment_revenue)
    mlabel = "revenue" if metric == "revenue" else f"{c.segment} revenue"
    fa, fb = money(value(a)), money(value(b))
    if fa == fb:
        return None  # the same figure in print: one page would answer both
    pct = (_billions(fb) / _billions(fa) - 1.0) * 100.0
    tid = f"{c.slug}-growth-q{q}-{year - 1}-{year}-{metric}"
    prompt = (
        f"By how much did {poss(c.name)} {mlabel} change from Q{q} {year - 1} to Q{q} {year}, in percent? "
        "Give both quarters' figures and cite the release of each."
    )
    day = b.release + dt.timedelta(days=rng.randint(3, 120))
    kind = "revenue" if metric == "revenue" else "segment"
    steps = [
        _step(c, qt, f, f"{poss(c.name)} {mlabel} in {qt.label} results", pages, kind)
        for qt, f in ((a, fa), (b, fb))
    ]
    rubric = _rubric(
        tid,
        prompt,
        [(fa, f"{mlabel} for {a.label}"), (fb, f"{mlabel} for {b.label}")],
        ("change", f"Gives the change from {a.label} to {b.label}: {pct:+.1f}%.", percent_re(pct)),
        steps,
        _sources(pages, c, [a, b]),
    )
    rubric["criteria"].append(hedge_criterion(pct))
    cap = mlabel[0].upper() + mlabel[1:]
    report = (
        f"{cap} was <FIGURE1> in {a.label} \\cite{{<URL1>}} and <FIGURE2> in {b.label} \\cite{{<URL2>}}: "
        f"a change of {pct:+.1f}%."
    )
    return _task(tid, "growth", prompt, day, rubric, steps, report)


def _compare(group: list[Company], qt_index: int, rng: random.Random, pages: dict) -> dict[str, Any] | None:
    qts = [c.quarters[qt_index] for c in group]
    figs = [money(qt.revenue) for qt in qts]
    if len(set(figs)) < len(figs):
        return None  # a tie in print: no single leader
    lead = max(range(len(group)), key=lambda k: _billions(figs[k]))
    label, first = qts[0].label, qts[0]
    names = [c.name for c in group]
    listed = ", ".join(names[:-1]) + f" and {names[-1]}"
    tid = f"compare-{'-'.join(c.slug for c in group)}-{first.year}-q{first.q}"
    prompt = (
        f"Which of {listed} reported the highest revenue in {label}? "
        "Give each company's figure and cite each release."
    )
    day = max(qt.release for qt in qts) + dt.timedelta(days=rng.randint(3, 120))
    steps = [
        _step(c, qt, f, f"{poss(c.name)} revenue in {label} results", pages, "revenue")
        for c, qt, f in zip(group, qts, figs, strict=True)
    ]
    winner = re.escape(names[lead])
    others = "|".join(re.escape(n) for k, n in enumerate(names) if k != lead)
    between = rf"(?:(?!\b(?:{others})\b|\bnot\b|n't\b|\b(?:trail|behind|lower|less|below|smaller)\w*)[^.;:]){{0,80}}?"
    lead_re = (
        rf"(?is)\b{winner}\b{between}\b(?:highest|higher|largest|larger|most|greatest|biggest|"
        r"led|leads|ahead|top)\b"
    )
    sources: dict[str, str] = {}
    for c, qt in zip(group, qts, strict=True):
        sources |= _sources(pages, c, [qt])
    rubric = _rubric(
        tid,
        prompt,
        [(f, f"{poss(c.name)} revenue for {label}") for c, f in zip(group, figs, strict=True)],
        ("leader", f"Names {names[lead]} as the company with the highest {label} revenue.", lead_re),
        steps,
        sources,
    )
    parts = [f"{c.name} <FIGURE{k + 1}> \\cite{{<URL{k + 1}>}}" for k, c in enumerate(group)]
    report = f"Revenue in {label}: " + "; ".join(parts) + f". {names[lead]} reported the highest revenue."
    return _task(tid, "compare", prompt, day, rubric, steps, report)


def _year_so_far(c: Company, year: int, n: int, rng: random.Random, pages: dict) -> dict[str, Any] | None:
    qts = [c.quarter(year, q) for q in range(1, n + 1)]
    figs = [money(qt.revenue) for qt in qts]
    if len(set(figs)) < n:
        return None  # two quarters print the same figure: one page would answer both
    nxt = c.quarter(year, n + 1)
    day = qts[-1].release + dt.timedelta(
        days=rng.randint(1, max(1, (nxt.release - qts[-1].release).days - 1))
    )
    tid = f"{c.slug}-{year}-so-far-{day.isoformat()}"
    prompt = (
        f"What revenue has {c.name} reported for each quarter of {year} so far? "
        "Cite the release of each quarter."
    )
    steps = [
        _step(c, qt, f, f"{poss(c.name)} revenue in {qt.label} results", pages, "revenue")
        for qt, f in zip(qts, figs, strict=True)
    ]
    label = rf"\bQ{nxt.q}\s+{year}\b"
    not_yet = rf"(?is){label}[^.;]{{0,80}}?{NOT_YET}|{NOT_YET}[^.;]{{0,80}}?{label}"
    early = [  # the next quarter's prediction and rumour, when they are already online
        money(x)
        for x, when in ((nxt.preview_revenue, nxt.preview), (nxt.gossip_revenue, nxt.gossip))
        if when <= day
    ]
    rubric = _rubric(
        tid,
        prompt,
        [(f, f"revenue for {qt.label}") for qt, f in zip(qts, figs, strict=True)],
        ("not_yet", f"Says the {nxt.label} results are not out yet at {day}.", not_yet),
        steps,
        _sources(pages, c, qts),
        early,
    )
    parts = [f"<FIGURE{k + 1}> in {qt.label} \\cite{{<URL{k + 1}>}}" for k, qt in enumerate(qts)]
    report = "Revenue was " + ", ".join(parts) + f". {nxt.label} results are not published yet."
    return _task(tid, "year_so_far", prompt, day, rubric, steps, report)


def _sources(pages: dict[str, dict[str, Any]], c: Company, qts: list[Quarter]) -> dict[str, str]:
    """Cite key → URL of every page about the quarters asked (so ``\\cite{<id>}`` names a page)."""
    return sources(pages, [i for qt in qts for i in source_ids(c, qt).values()])


def make_multi_tasks(
    companies: list[Company], pages: dict[str, dict[str, Any]], rng: random.Random
) -> list[dict[str, Any]]:
    """Multi-source tasks about ``companies`` (one split's): per company two growth tasks (revenue
    and the segment's) and one year-so-far task; per company one comparison with the next one or
    two companies (when there are at least two)."""
    tasks: list[dict[str, Any]] = []

    def first(draw: Any) -> None:
        for _ in range(_TRIES):  # a draw whose figures are distinct in print
            made = draw()
            if made is not None:
                tasks.append(made)
                return

    for i, c in enumerate(companies):
        for metric in ("revenue", "segment"):
            first(lambda c=c, m=metric: _growth(c, rng.randint(1, 4), rng.choice(YEARS[1:-1]), m, rng, pages))
        first(lambda c=c: _year_so_far(c, rng.choice(YEARS[1:]), rng.randint(2, 3), rng, pages))
        if len(companies) >= 2:
            size = min(len(companies), rng.choice((2, 3)))
            group = [companies[(i + k) % len(companies)] for k in range(size)]
            first(lambda g=group, c=c: _compare(g, rng.randint(0, len(c.quarters) - 2), rng, pages))
    return tasks
