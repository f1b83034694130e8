"""The ``correction`` family (``agentrl.env.sandbox.correction``): a quarter's net income restated
by a later amended filing. The pages print the right figures in the right order of dates, no other
task asks for a figure a restatement replaces, the oracle solves every task by reading the release
and the amendment, and no shortcut (the release read as the answer among them) earns over 0.05."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import random
import re
from pathlib import Path

import pytest

from agentrl.env import ResearchEnv
from agentrl.env.sandbox import build
from agentrl.env.sandbox.correction import FAMILY, make_corrections
from agentrl.env.sandbox.pages import render_company, source_ids
from agentrl.env.sandbox.tasks import official
from agentrl.env.sandbox.world import make_world, money
from agentrl.judge import normalized_reward, parse_rubric
from agentrl.judge.regex_lint import rubric_warnings
from agentrl.policy import OraclePolicy
from agentrl.rollout.probe import SHORTCUTS, ShortcutPolicy
from agentrl.rollout.runner import run_policy_episode

ROOT = Path(__file__).resolve().parents[2]
_MONEY = re.compile(r"\$\d+\.\d (?:billion|trillion)")


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("corrections")
    build(out, seed=3, companies=4, heldout=2, long_horizon=True)
    return out


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _corrections(world: Path) -> list[dict]:
    return [t for t in _lines(world / "tasks.jsonl") if t["family"] == FAMILY]


def _pattern(task: dict, cid: str) -> str:
    return next(c["grader"]["pattern"] for c in task["rubric"]["criteria"] if c["id"] == cid)


def test_the_family_ships_in_both_splits_of_the_long_horizon_example():
    env = ResearchEnv({"suite": str(ROOT / "examples" / "long-horizon-env")})
    held = ResearchEnv({"suite": str(ROOT / "examples" / "long-horizon-env"), "split": "heldout"})
    for e in (env, held):
        assert any(t.id.endswith("-net-income-restated") for t in e.tasks), e.config.split


def test_the_amendment_comes_after_the_release_and_the_annual_report_and_prints_the_right_figures(world):
    pages = {p["id"]: p for p in _lines(world / "corpus.jsonl")}
    world_cos = {c.slug: c for c in make_world(3, 6)}
    tasks = _corrections(world)
    assert {t.get("split", "train") for t in tasks} == {"train", "heldout"}
    assert len(tasks) == 6  # one per company
    for t in tasks:
        release, amended = (s["official"] for s in t["ground_truth"]["steps"])
        slug, q, year = re.match(r"(.+)-q(\d)-(\d{4})-net-income-restated$", t["id"]).groups()
        qt = world_cos[slug].quarter(int(year), int(q))
        original, restated = money(qt.net_income), amended["figure"]
        assert release["figure"] == original != restated
        day = dt.date.fromisoformat
        assert qt.release < qt.filing < day(amended["date"]) < day(t["date"])
        assert world_cos[slug].annual_report[qt.year] < day(amended["date"])
        assert (
            pages[release["id"]]["date"] == release["date"]
            and pages[amended["id"]]["date"] == amended["date"]
        )
        assert f"Net income for {qt.label} was {original}." in pages[release["id"]]["body"]
        body = pages[amended["id"]]["body"]
        assert f"as restated: {restated}. It replaces the figure first reported" in body[:400]
        assert set(_MONEY.findall(body)) == {restated}  # the original is read from the release
        # no other page about the quarter or its year prints the restated figure: only the
        # amendment supports it
        about = [*source_ids(world_cos[slug], qt).values()]
        about += [f"{slug}-annual-{year}", f"preview-{slug}-fy-{year}", f"gossip-{slug}-fy-{year}"]
        assert len(about) == 8 and not any(restated in pages[i]["body"] for i in about), t["id"]


def test_no_task_asks_after_a_restatement_for_the_figure_it_replaces(world):
    tasks = _lines(world / "tasks.jsonl")
    for t in _corrections(world):
        release, amended = (s["official"] for s in t["ground_truth"]["steps"])
        for other in tasks:
            gt = other["ground_truth"]
            for src in [s["official"] for s in gt.get("steps", [])] or [gt["official"]]:
                stale = src["url"] == release["url"] and src["figure"] == release["figure"]
                assert not stale or other["date"] < amended["date"] or other["id"] == t["id"], (
                    t["id"],
                    other["id"],
                )


def test_a_quarter_some_task_asks_for_after_the_restatement_is_never_restated():
    """Tasks that ask for every quarter's net income far in the future leave no quarter to
    restate; without them every company gets one."""
    world = make_world(11, 3)
    rng = random.Random(0)
    pages = {p["id"]: p for c in world for p in render_company(c, rng)}
    later = [
        {"date": "2100-01-01", "ground_truth": {"official": official(c, qt, money(qt.net_income))}}
        for c in world
        for qt in c.quarters
    ]
    assert make_corrections(world, pages, later, random.Random(1)) == ([], [])
    earlier = [{**t, "date": "2000-01-01"} for t in later]  # before any amendment: no conflict
    filings, tasks = make_corrections(world, pages, earlier, random.Random(1))
    assert len(filings) == len(tasks) == 3


def _steps(world: Path, task_id: str) -> list[dict]:
    return next(t for t in _corrections(world) if t["id"] == task_id)["ground_truth"]["steps"]


def _run(world: Path, policy, split: str) -> list:
    env = ResearchEnv(
        {"suite": str(world), "split": split, "budgets": {"max_turns": 8, "max_tool_calls": 12}}
    )

    async def go() -> list:
        return [
            await run_policy_episode(env, policy, t, 0, 0) for t in env.tasks if t.id.endswith("-restated")
        ]

    return asyncio.run(go())


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_the_oracle_reads_the_release_then_the_amendment_and_scores_the_maximum(world, split):
    trajs = _run(world, OraclePolicy(0.0), split)
    assert trajs
    for tr in trajs:
        assert normalized_reward(tr) >= 0.999, (tr.task_id, [(c.id, c.score) for c in tr.reward.criteria])
        opened = [c.function.parsed_arguments()["url"] for m in tr.messages if m.role == "assistant"
                  for c in m.tool_calls or [] if c.function.name == "open_url"]  # fmt: skip
        steps = [s["official"]["url"] for s in _steps(world, tr.task_id)]
        assert opened == steps and steps[1].endswith("-10qa.pdf")


@pytest.mark.parametrize("kind", list(SHORTCUTS))
def test_no_shortcut_earns_over_005_on_a_restatement(world, kind):
    trajs = _run(world, ShortcutPolicy(kind), "train") + _run(world, ShortcutPolicy(kind), "heldout")
    assert len(trajs) == 6
    assert max(normalized_reward(t) for t in trajs) <= 0.05, [
        (t.task_id, normalized_reward(t)) for t in trajs
    ]
    if kind == "original-only":  # the release's figure given as the answer is the flaw itself
        assert all(next(c.score for c in t.reward.criteria if c.id == "superseded") > 0 for t in trajs)


def test_a_noisy_oracle_that_opens_the_original_10q_misses_the_restatement(world):
    trajs = _run(world, OraclePolicy(1.0), "train")
    assert max(normalized_reward(t) for t in trajs) <= 0.05


def test_the_rubrics_regexes_lint_clean(world):
    rubrics = [parse_rubric(t["rubric"]) for t in _corrections(world)]
    assert [w for r in rubrics for w in rubric_warnings(r)] == []


@pytest.mark.parametrize(
    ("report", "revised", "superseded"),
    [
        (
            "Net income was restated to $1.4 billion \\cite{a}; the figure first reported was $1.2 billion.",
            1,
            0,
        ),
        ("Net income was originally $1.2 billion. It was restated to $1.4 billion.", 1, 0),
        ("The amended 10-Q revised net income to $1.4 billion from $1.2 billion.", 1, 0),
        ("Net income was $1.2 billion, later restated to $1.4 billion.", 1, 0),
        ("Net income is $1.4 billion (restated); it was first reported as $1.2 billion.", 1, 0),
        ("Net income was $1.2 billion \\cite{a}.", 0, 1),
        ("Net income was $1.2 billion. A later filing restated it to $1.4 billion.", 0, 1),
        ("Net income was restated to $1.2 billion, replacing $1.4 billion.", 0, 1),  # swapped
        (
            "Net income, revised from the release, is $1.2 billion; the figure first reported was $1.4 billion.",
            0,
            1,
        ),
        ("Net income is $1.2 billion (restated).", 0, 1),
        ("It was restated.\nNet income: $1.2 billion", 0, 1),
        ("Net income was $1.4 billion (restated).", 0, 0),
    ],
)
def test_the_original_figure_pays_as_superseded_and_costs_as_the_answer(world, report, revised, superseded):
    t = next(
        t
        for t in _corrections(world)
        if t["ground_truth"]["steps"][0]["official"]["figure"] == "$1.2 billion"
    )
    assert t["ground_truth"]["steps"][1]["official"]["figure"] == "$1.4 billion"
    assert bool(re.search(_pattern(t, "revised"), report)) is bool(revised)
    assert bool(re.search(_pattern(t, "superseded"), report)) is bool(superseded)


def test_a_swapped_or_hedged_report_earns_at_most_005(world):
    """After reading both pages: the superseded figure given as the revised one, or both figures
    offered, earns nothing beyond the penalties (the honest report earns the maximum)."""
    import json as _json

    env = ResearchEnv({"suite": str(world), "budgets": {"max_turns": 8, "max_tool_calls": 12}})

    def call(name: str, **args: str) -> str:
        return f"<tool_call>{_json.dumps({'name': name, 'arguments': args})}</tool_call>"

    def play(task, report: str) -> float:  # type: ignore[no-untyped-def]
        env.reset(seed=0, options={"task": task})
        for s in task.ground_truth["steps"]:
            env.step(call("open_url", url=s["official"]["url"]))
        env.step(call("answer", report=report))
        return normalized_reward(env.trajectory())

    tasks = [t for t in env.tasks if t.id.endswith("-restated")]
    assert tasks
    for t in tasks:
        (rel, amd) = (s["official"] for s in t.ground_truth["steps"])
        old, new, a, r = rel["figure"], amd["figure"], amd["id"], rel["id"]
        honest = f"Net income was restated to {new} \\cite{{{a}}}; the figure first reported was {old} \\cite{{{r}}}."
        assert play(t, honest) >= 0.999
        aside = f"Net income was restated to {new} \\cite{{{a}}} (or {old} as first reported \\cite{{{r}}})."
        assert play(t, aside) >= 0.999  # an "or" that introduces the original is no hedge
        for bad in (
            f"Net income, revised from the release, is {old} \\cite{{{a}}}; the figure first reported was {new} \\cite{{{r}}}.",
            f"Net income was restated to {old} \\cite{{{a}}}, replacing {new} \\cite{{{r}}}.",
            f"Net income, revised from the first reported figure, is either {old} or {new} \\cite{{{a}}} \\cite{{{r}}}.",
            f"Net income was restated to {new} or {old} \\cite{{{a}}}; first reported as {old} \\cite{{{r}}}.",
        ):
            assert play(t, bad) <= 0.05, (t.id, bad)
