"""The multi-source sandbox families (``build(long_horizon=True)``): no single page answers a task
(but a restatement's amended filing), the oracle solves every one by reading each source, and no
shortcut earns more than 0.05."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from agentrl.env import ResearchEnv
from agentrl.env.sandbox import build
from agentrl.env.sandbox.multi import FAMILIES, percent_re
from agentrl.judge import normalized_reward
from agentrl.policy import OraclePolicy
from agentrl.rollout.probe import MULTI_SOURCE, probe
from agentrl.rollout.runner import run_policy_episode

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("long-horizon")
    build(out, seed=3, companies=4, heldout=2, long_horizon=True)
    return out


def _tasks(world: Path) -> list[dict]:
    return [json.loads(line) for line in (world / "tasks.jsonl").read_text().splitlines()]


def _multi(world: Path) -> list[dict]:
    return [t for t in _tasks(world) if t["family"] in FAMILIES]


def test_every_family_is_in_both_splits_and_the_one_source_tasks_are_unchanged(world, tmp_path):
    tasks = _tasks(world)
    for split in ("train", "heldout"):
        fams = {t["family"] for t in tasks if t.get("split", "train") == split}
        assert set(FAMILIES) <= fams, (split, fams)
    plain = tmp_path / "plain"
    build(plain, seed=3, companies=4, heldout=2)
    assert [t for t in tasks if t["family"] not in FAMILIES] == _tasks(plain)
    # every page is as it was; the restatements' amended filings come after them
    before, after = (plain / "corpus.jsonl").read_bytes(), (world / "corpus.jsonl").read_bytes()
    assert after.startswith(before)
    added = [json.loads(line) for line in after[len(before) :].decode().splitlines()]
    assert added and {p["kind"] for p in added} == {"filing"} and all("-10qa-" in p["id"] for p in added)


def test_no_single_page_prints_every_figure_a_task_asks(world):
    """A restatement's amended filing too: it names the release it replaces, not the figure."""
    pages = [json.loads(line) for line in (world / "corpus.jsonl").read_text().splitlines()]
    texts = [p.get("text") or p.get("html") or json.dumps(p) for p in pages]
    for t in _multi(world):
        figs = [s["official"]["figure"] for s in t["ground_truth"]["steps"]]
        assert len(figs) >= 2 and len(set(figs)) == len(figs), t["id"]
        assert not any(all(f in text for f in figs) for text in texts), t["id"]


def test_the_oracle_solves_every_multi_source_task_by_reading_each_source(world):
    env = ResearchEnv({"suite": str(world), "budgets": {"max_turns": 8, "max_tool_calls": 12}})
    heldout = ResearchEnv(
        {"suite": str(world), "split": "heldout", "budgets": {"max_turns": 8, "max_tool_calls": 12}}
    )

    async def run(e: ResearchEnv) -> list:
        return [
            await run_policy_episode(e, OraclePolicy(0.0), t, 0, 0)
            for t in e.tasks
            if t.ground_truth.get("steps")
        ]

    trajs = asyncio.run(run(env)) + asyncio.run(run(heldout))
    assert len(trajs) == len(_multi(world))
    for tr in trajs:
        assert normalized_reward(tr) >= 0.999, (tr.task_id, [(c.id, c.score) for c in tr.reward.criteria])
        steps = next(t for t in _multi(world) if t["id"] == tr.task_id)["ground_truth"]["steps"]
        opened = [c.function.parsed_arguments()["url"] for m in tr.messages if m.role == "assistant"
                  for c in m.tool_calls or [] if c.function.name == "open_url"]  # fmt: skip
        assert opened == [s["official"]["url"] for s in steps]


def test_a_noisy_oracle_that_reads_a_prediction_is_penalised(world):
    env = ResearchEnv({"suite": str(world), "budgets": {"max_turns": 8, "max_tool_calls": 12}})

    async def run() -> list:
        return [
            await run_policy_episode(env, OraclePolicy(1.0), t, 0, s)
            for t in env.tasks if t.ground_truth.get("steps") for s in range(2)
        ]  # fmt: skip

    rewards = [normalized_reward(t) for t in asyncio.run(run())]
    assert max(rewards) < 1.0 and min(rewards) <= 0.0


def test_every_shortcut_earns_at_most_005_on_the_multi_source_tasks(world):
    result = probe(str(world))
    assert result.oracle.mean >= 0.99
    rows = {r.policy.removeprefix("shortcut:"): r for r in result.shortcuts}
    assert set(rows) >= MULTI_SOURCE
    n = len([t for t in _multi(world) if t.get("split", "train") == "train"])
    assert all(len(rows[k].rewards) == n for k in MULTI_SOURCE)
    assert not result.failing, [(r.policy, r.mean) for r in result.failing]


def test_a_figure_read_in_a_search_snippet_only_does_not_pay_where_the_page_must_be_opened(world):
    """The growth task's figures are in the search snippets (news titles print them): with
    ``opened`` they pay only once the release is opened."""
    result = probe(str(world), shortcuts=["search-snippets"])
    (row,) = result.shortcuts
    assert row.rewards and max(row.rewards) == 0.0 and not row.passed


@pytest.mark.parametrize(
    ("pct", "text", "hit"),
    [
        (6.5, "a change of +6.5%", True),
        (6.5, "revenue grew 6.4 percent", True),
        (6.5, "up 6.6 per cent", True),
        (6.5, "6.5%", False),  # no direction
        (6.5, "it fell 6.5%", False),  # the wrong direction
        (6.5, "up 6.7%", False),
        (-3.2, "fell 3.2%", True),
        (-3.2, "a change of -3.2%", True),
        (-3.2, "grew 3.2%", False),
        (6.5, "up 16.5%", False),
        (6.5, "+6.50%", False),
        (0.0, "flat at 0.0%", True),
    ],
)
def test_the_change_is_read_to_one_decimal_with_its_direction(pct, text, hit):
    import re

    assert bool(re.search(percent_re(pct), text)) is hit


def test_the_long_horizon_example_loads_with_room_for_every_step():
    env = ResearchEnv({"suite": str(ROOT / "examples" / "long-horizon-env")})
    steps = max(len(t.ground_truth.get("steps", [])) for t in env.tasks)
    assert steps >= 3 and env.config.budgets.max_turns >= 2 * steps + 1
    assert env.config.budgets.max_tool_calls >= 2 * steps


def test_processes_that_build_the_same_sandbox_at_once_all_get_it_whole(tmp_path):
    """Test workers (or two runs) materialise one sandbox together: each builds privately and the
    first rename wins, so none reads a half-written directory or fails on another's temp files."""
    import os
    import subprocess
    import sys

    code = (
        "from agentrl.env.sandbox import materialize; "
        "print(materialize(seed=5, companies=3, heldout=1, long_horizon=True))"
    )
    env = {**os.environ, "AGENTRL_CACHE": str(tmp_path)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(6)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, [err[-500:] for _, err in outs]
    (where,) = {out.strip() for out, _ in outs}
    assert os.listdir(tmp_path / "sandbox") == [Path(where).name]
    assert len(_tasks(Path(where))) > 0


def test_the_derived_criteria_read_the_conclusion_where_it_is_written(world):
    """The leader must be the subject of "highest" (no other company or negation between them);
    "not yet" must be said of the next quarter, in its sentence."""
    import re

    def pattern(task: dict, cid: str) -> str:
        return next(c["grader"]["pattern"] for c in task["rubric"]["criteria"] if c["id"] == cid)

    for t in (t for t in _multi(world) if t["family"] == "compare"):
        names = [s["query"].split("'")[0] for s in t["ground_truth"]["steps"]]
        winner = re.search(r"\. (.+) reported the highest revenue\.$", t["ground_truth"]["report"]).group(1)
        loser = next(n for n in names if n != winner)
        lead = pattern(t, "leader")
        assert re.search(lead, f"{winner} reported the highest revenue.")
        assert not re.search(lead, f"{loser} had the highest revenue, ahead of {winner}.")
        assert not re.search(lead, f"{winner} did not report the highest revenue.")
        assert not re.search(lead, f"{', '.join(names)}: one of these reported the highest revenue.")
    for t in (t for t in _multi(world) if t["family"] == "year_so_far"):
        nxt = re.search(r"(Q\d \d{4}) results are not published yet", t["ground_truth"]["report"]).group(1)
        not_yet = pattern(t, "not_yet")
        assert re.search(not_yet, f"{nxt} results are not published yet.")
        assert not re.search(not_yet, f"Revenue in {nxt} was strong. Other data is not available yet.")


@pytest.mark.parametrize(
    ("text", "hedge"),
    [
        ("up or down 3.3%", True),
        ("rose/fell 3.3%", True),
        ("+/-3.3%", True),
        ("\u00b1 3.3%", True),
        ("it grew 3.3% or fell 3.3%.", True),
        ("a change of +3.3% or -3.3%.", True),
        ("it fell 3.3%, or rose 3.3%.", True),
        ("it rose (or fell) 3.3%.", True),
        ("it increased or maybe decreased 3.3%.", True),
        ("a change of +3.3%.", False),
        ("Revenue fell in Q1 but grew 3.3% year over year.", False),  # the change is the rise
        ("Revenue grew and net income fell 2%; a change of +3.3%.", False),
    ],
)
def test_a_hedge_is_both_directions_of_the_change(text, hedge):
    import re

    from agentrl.env.sandbox.multi import hedge_re

    assert bool(re.search(hedge_re(3.3), text)) is hedge
    if not hedge:  # and the honest ones are paid their direction
        assert re.search(percent_re(3.3), text) and not re.search(percent_re(-3.3), text)


def test_a_change_given_both_ways_is_not_paid_for_its_direction(world):
    """A report that gives the change both ways would match the direction regex for the direction
    it happens to name: the growth rubric's ``hedge`` criterion takes the derived weight back."""
    import re

    class Hedging(OraclePolicy):
        def __init__(self, way: str) -> None:
            super().__init__(0.0)
            self.way = way

        async def act(self, messages, ctx):  # type: ignore[no-untyped-def]
            msg = await super().act(messages, ctx)
            return msg.model_copy(
                update={"content": re.sub(r"a change of ([+-])(\d+\.\d)%", self.way, msg.text)}
            )

    env = ResearchEnv({"suite": str(world), "budgets": {"max_turns": 8, "max_tool_calls": 12}})
    growth = [t for t in env.tasks if t.ground_truth.get("steps") and "-growth-" in t.id]
    assert growth

    async def run(policy) -> list:  # type: ignore[no-untyped-def]
        return [await run_policy_episode(env, policy, t, 0, 0) for t in growth]

    ways = (r"a change of up or down \2%", r"it grew \2% or fell \2%", r"a change of +\2% or -\2%",
            r"it rose (or fell) \2%", r"it increased or maybe decreased \2%", "a change of \u00b1\\2%")  # fmt: skip
    for way in ways:
        trajs = asyncio.run(run(Hedging(way)))
        assert all("hedge" in [c.id for c in t.reward.criteria if c.score] for t in trajs), way
        assert max(normalized_reward(t) for t in trajs) <= 0.5, way
    assert min(normalized_reward(t) for t in asyncio.run(run(OraclePolicy(0.0)))) >= 0.999
