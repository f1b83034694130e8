"""The multi-source rubrics, checked against the world's own published figures.

For every multi-source family (``agentrl.env.sandbox.multi.FAMILIES``), on many generated worlds, the
expected conclusion is recomputed here from the pages the task's steps point to — the releases' and
amendments' printed figures and dates — never from the generator's variables or the ground truth's
report: the change and its direction (growth), the leader (compare), the next quarter that is not
out yet (year_so_far), the restated figure and the one first reported (correction). A report that
states that conclusion, with the figures and citations of the pages it opened, earns the best score;
the same report with any other conclusion earns nothing on the derived criterion. Ties and equal
figures (in print) are drawn on purpose: the generator then makes no task, since no page can settle
the question.
"""

from __future__ import annotations

import datetime as dt
import math
import random
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrl.env.sandbox.correction import make_corrections
from agentrl.env.sandbox.multi import FAMILIES, _compare, _growth, make_multi_tasks
from agentrl.env.sandbox.pages import ORDINAL, render_company
from agentrl.env.sandbox.world import make_world
from agentrl.judge import parse_rubric
from agentrl.judge.evidence import Evidence, Observation, normalize_url
from agentrl.judge.graders import score_deterministic

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: Whole worlds: each has about 15 tasks of the four families.
WORLDS = settings(SETTINGS, max_examples=20)
_AMOUNT = re.compile(r"\$(\d+(?:\.\d+)?) (billion|trillion)")
#: The criterion each family derives from its figures.
DERIVED = {"growth": "change", "compare": "leader", "year_so_far": "not_yet", "correction": "revised"}


# ---- the world as a reader sees it -------------------------------------------------------------
def billions(printed: str) -> float:
    """``$12.3 billion`` → 12.3, ``$1.2 trillion`` → 1200.0 (a parser of this test's own)."""
    m = _AMOUNT.fullmatch(printed)
    assert m, printed
    return float(m.group(1)) * (1000.0 if m.group(2) == "trillion" else 1.0)


def release(page: dict[str, Any]) -> dict[str, Any]:
    """What a results release prints: the company, the quarter, its revenue, its segment and the
    segment's revenue, its net income, and the day it was published."""
    name, ordinal, year = re.fullmatch(
        r"(.+) Announces (\w+) Quarter (\d{4}) Results", page["title"]
    ).groups()
    q = {v: k for k, v in ORDINAL.items()}[ordinal]
    label = f"Q{q} {year}"
    body = page["body"]
    amount = r"(\$\d+(?:\.\d+)? (?:billion|trillion))"
    revenue, segment, seg_revenue = re.search(
        rf"Total revenue for {label} was {amount}\. ([^.<]+?) revenue was {amount}\.", body
    ).groups()
    (net,) = re.search(rf"Net income for {label} was {amount}\.", body).groups()
    return {"name": name, "q": q, "year": int(year), "label": label, "revenue": revenue,
            "segment": segment, "segment_revenue": seg_revenue, "net_income": net,
            "date": dt.date.fromisoformat(page["date"]), "url": page["url"]}  # fmt: skip


def world(seed: int, companies: int = 3) -> tuple[dict[str, dict], list[dict]]:
    """A generated world (the way ``build(long_horizon=True)`` draws it): its pages by URL and its
    multi-source tasks."""
    comps = make_world(seed, companies)
    page_rng, rng = random.Random(seed * 7919 + 1), random.Random(seed * 15485863 + 3)
    by_id = {p["id"]: p for c in comps for p in render_company(c, page_rng)}
    tasks = make_multi_tasks(comps, by_id, rng)
    amendments, corrections = make_corrections(comps, by_id, tasks, rng)
    by_url = {p["url"]: p for p in [*by_id.values(), *amendments]}
    return by_url, tasks + corrections


def evidence(pages: list[dict[str, Any]]) -> Evidence:
    """An episode that opened ``pages`` (and nothing else)."""
    return Evidence(
        tuple(Observation("open_url", frozenset({normalize_url(p["url"])}), p["body"]) for p in pages)
    )


def score(task: dict, report: str, opened: list[dict]) -> tuple[float, dict[str, float]]:
    """(normalised reward, score per criterion) of ``report`` by the task's own rubric."""
    r = score_deterministic(
        parse_rubric(task["rubric"], source=task["id"]), report, evidence=evidence(opened)
    )
    assert r.total is not None
    return r.total / task["ground_truth"]["max_score"], {c.id: c.score for c in r.criteria}


# ---- the expected conclusion of each family, and reports that state it (or not) ---------------
def growth(task: dict, pages: list[dict]) -> tuple[str, list[str]]:
    a, b = sorted((release(p) for p in pages), key=lambda r: (r["year"], r["q"]))
    assert (a["q"], a["year"] + 1) == (b["q"], b["year"])  # the same quarter of two years
    metric = "segment_revenue" if f"{a['segment']} revenue change" in task["prompt"] else "revenue"
    fa, fb = a[metric], b[metric]
    pct = (billions(fb) / billions(fa) - 1.0) * 100.0
    body = f"It was {fa} in {a['label']} \\cite{{{a['url']}}} and {fb} in {b['label']} \\cite{{{b['url']}}}: "
    right = body + f"a change of {pct:+.1f}%."
    if round(pct, 1) == 0.0:  # a change of 0.0% has no direction: only another size is wrong
        return right, [body + "a change of +0.5%.", body + "a change of -0.5%."]
    inverted = (billions(fa) / billions(fb) - 1.0) * 100.0
    off = pct + math.copysign(0.3, pct)
    return right, [body + f"a change of {x:+.1f}%." for x in (-pct, inverted, off)] + [
        body + f"it {'fell' if pct > 0 else 'grew'} {abs(pct):.1f}%."
    ]


def compare(task: dict, pages: list[dict]) -> tuple[str, list[str]]:
    rows = [release(p) for p in pages]
    assert len({r["label"] for r in rows}) == 1 and len({r["name"] for r in rows}) == len(rows)
    values = [billions(r["revenue"]) for r in rows]
    assert len(set(values)) == len(values)  # no tie in print, or no task at all
    leader = rows[values.index(max(values))]["name"]
    figures = "; ".join(f"{r['name']} {r['revenue']} \\cite{{{r['url']}}}" for r in rows)
    body = f"Revenue in {rows[0]['label']}: {figures}. "
    wrong = [body + f"{r['name']} reported the highest revenue." for r in rows if r["name"] != leader]
    return body + f"{leader} reported the highest revenue.", wrong


def year_so_far(task: dict, pages: list[dict], by_url: dict[str, dict]) -> tuple[str, list[str]]:
    rows = [release(p) for p in pages]
    day = dt.date.fromisoformat(task["date"])
    (name,), (year,) = {r["name"] for r in rows}, {r["year"] for r in rows}
    # the year so far is every quarter of the year released by the task's date, and nothing else
    published = sorted(
        (r for p in by_url.values() if p["kind"] == "official" and p["title"].startswith(f"{name} Announces")
         for r in [release(p)] if r["year"] == year),
        key=lambda r: r["q"],
    )  # fmt: skip
    out = [r["q"] for r in published if r["date"] <= day]
    assert sorted(r["q"] for r in rows) == out == list(range(1, len(out) + 1))
    nxt = len(out) + 1
    assert nxt <= 4 and published[nxt - 1]["date"] > day  # the next quarter is not out at the date
    listed = ", ".join(f"{r['revenue']} in {r['label']} \\cite{{{r['url']}}}" for r in rows)
    body = f"Revenue was {listed}. "
    wrong = [
        body + f"{label} results are not published yet."
        for label in (f"Q{nxt - 1} {year}", f"Q{nxt} {year + 1}")
    ]
    return body + f"Q{nxt} {year} results are not published yet.", wrong


def correction(task: dict, pages: list[dict]) -> tuple[str, list[str]]:
    first, amendment = pages
    r = release(first)
    (restated,) = re.search(
        rf"Net income for {r['label']}, as restated: (\$\d+(?:\.\d+)? (?:billion|trillion))\.",
        amendment["body"],
    ).groups()
    assert restated != r["net_income"] and amendment["date"] <= task["date"]
    new, old = f"\\cite{{{amendment['url']}}}", f"\\cite{{{r['url']}}}"

    def say(now: str, now_cite: str, then: str, then_cite: str) -> str:
        return f"{r['name']} restated its {r['label']} net income to {now} {now_cite}; the figure first reported was {then} {then_cite}."

    return say(restated, new, r["net_income"], old), [say(r["net_income"], old, restated, new)]


def expected(task: dict, by_url: dict[str, dict]) -> tuple[str, list[str], list[dict]]:
    """(the right report, wrong ones, the pages it opened), from the pages of the task's steps."""
    pages = [by_url[s["official"]["url"]] for s in task["ground_truth"]["steps"]]
    day = dt.date.fromisoformat(task["date"])
    assert all(dt.date.fromisoformat(p["date"]) <= day for p in pages)  # every source is out
    fam = task["family"]
    if fam == "year_so_far":
        right, wrong = year_so_far(task, pages, by_url)
    else:
        right, wrong = {"growth": growth, "compare": compare, "correction": correction}[fam](task, pages)
    return right, wrong, pages


def check(task: dict, by_url: dict[str, dict]) -> None:
    right, wrong, opened = expected(task, by_url)
    derived = DERIVED[task["family"]]
    normalised, crit = score(task, right, opened)
    assert crit[derived] == 1.0 and normalised == pytest.approx(1.0), (task["id"], right, crit)
    assert wrong
    for report in wrong:
        normalised, crit = score(task, report, opened)
        assert crit[derived] == 0.0 and normalised < 0.5, (task["id"], report, crit)


# ---- the property tests ------------------------------------------------------------------------
@WORLDS
@given(seed=st.integers(0, 2**31 - 1))
def test_every_multi_source_rubric_pays_the_conclusion_its_pages_support(seed):
    by_url, tasks = world(seed)
    assert {t["family"] for t in tasks} == set(FAMILIES)
    for task in tasks:
        check(task, by_url)


def test_the_worlds_of_the_suite_seeds_too():
    """The seeds the suite's own tests and examples build (and a few more), whatever hypothesis draws."""
    for seed in (0, 1, 2, 3, 5, 7, 11):
        by_url, tasks = world(seed, companies=4)
        for task in tasks:
            check(task, by_url)


tenths = st.integers(20, 2000).map(lambda x: x / 10)  # $2.0 to $200.0 billion, as the world prints them


@SETTINGS
@given(base=tenths, steps=st.lists(st.integers(-2, 2), min_size=1, max_size=2), index=st.integers(0, 18))
def test_a_comparison_with_a_tie_in_print_has_no_task_and_a_near_tie_has_the_right_leader(base, steps, index):
    """Revenues one printed step apart, or equal: equal ones leave no single leader (no task)."""
    group = make_world(5, 1 + len(steps))
    for c, k in zip(group, [0, *steps], strict=True):
        c.quarters[index].revenue = round(base + k / 10, 1)
    rng = random.Random(0)
    by_id = {p["id"]: p for c in group for p in render_company(c, rng)}
    task = _compare(group, index, random.Random(1), by_id)
    if len(set(steps) | {0}) < len(group):
        assert task is None
        return
    assert task is not None
    check(task, {p["url"]: p for p in by_id.values()})


@SETTINGS
@given(a=tenths, delta=st.integers(-3, 3), q=st.integers(1, 4), year=st.sampled_from([2022, 2023, 2024]),
       metric=st.sampled_from(["revenue", "segment"]))  # fmt: skip
def test_growth_between_equal_or_nearly_equal_figures(a, delta, q, year, metric):
    """Equal figures in print make no task; a change that rounds to 0.0% needs no direction, and
    one a printed step away is paid only in its direction."""
    (c,) = make_world(9, 1)
    field = "revenue" if metric == "revenue" else "segment_revenue"
    for qt, value in ((c.quarter(year - 1, q), a), (c.quarter(year, q), round(a + delta / 10, 1))):
        setattr(qt, field, value)
    by_id = {p["id"]: p for p in render_company(c, random.Random(0))}
    task = _growth(c, q, year, metric, random.Random(1), by_id)
    if delta == 0:
        assert task is None
        return
    assert task is not None
    check(task, {p["url"]: p for p in by_id.values()})
