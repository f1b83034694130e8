"""Bounded deterministic grading: a hostile report cannot stall scoring nor escape a penalty."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentrl.judge import Judge, JudgeConfig, evidence_of, load_rubric, parse_rubric, score_deterministic
from agentrl.judge.bounds import MAX_REPORT_CHARS
from agentrl.judge.graders import grade_criterion
from tests.judge.conftest import GOOD_REPORT, GOSSIP_REPORT, make_trajectory

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = "a" * 40 + "b"


def catastrophic_rubric() -> dict:
    """Python's ``re`` needs about 2**40 steps for each pattern but ``b`` on ``HOSTILE``. Regex
    criteria run in rubric order and share one time budget: once ``alt`` has spent it, ``flaw`` is
    undecided too."""
    return {
        "id": "catastrophic",
        "criteria": [
            {"id": "nested", "text": "t", "weight": 1.0, "grader": {"type": "regex", "pattern": "(a+)+$"}},
            {"id": "cite", "text": "t", "weight": 0.5, "grader": {"type": "regex", "pattern": "b"}},
            {"id": "alt", "text": "t", "weight": 1.0, "grader": {"type": "regex", "pattern": "(a|a)*$"}},
            {
                "id": "flaw",
                "kind": "negative",
                "text": "t",
                "weight": -1.0,
                "grader": {"type": "regex", "pattern": "(a|aa)+$"},
            },
        ],
    }


_CHILD = """
import json, sys, time
from agentrl.judge import parse_rubric, score_deterministic
rubric = parse_rubric(json.loads(sys.argv[1]))
t0 = time.monotonic()
r = score_deterministic(rubric, sys.argv[2], time_limit_s=float(sys.argv[3]))
print(json.dumps({"wall": time.monotonic() - t0, "reward": r.model_dump(mode="json")}))
"""


def test_catastrophic_patterns_cannot_hang_scoring():
    # In a child process with a hard timeout, so that a regression fails instead of hanging the suite.
    argv = [sys.executable, "-c", _CHILD, json.dumps(catastrophic_rubric()), HOSTILE, "0.5"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=ROOT, check=True)
    except subprocess.TimeoutExpired:
        pytest.fail("scoring a 41-character report did not finish within 60 s")
    out = json.loads(done.stdout)
    # Budget 0.5 s for the whole report (every regex criterion shares it); generous for a busy machine.
    assert out["wall"] < 5.0
    reward = out["reward"]
    by_id = {c["id"]: c for c in reward["criteria"]}
    assert reward["status"] == "ok"
    assert by_id["nested"]["verdict"] == "Not Satisfied"  # decided (regex handles it) or undecided
    assert by_id["cite"]["verdict"] == "Fully Satisfied"  # graded before the budget went
    assert by_id["alt"]["verdict"] == "Not Satisfied" and "undecided" in by_id["alt"]["reasoning"]
    # A report that times out a penalty does not escape it.
    assert by_id["flaw"]["verdict"] == "Fully Satisfied" and by_id["flaw"]["score"] == 1.0
    assert (
        "ran out of the report's time budget" in by_id["flaw"]["reasoning"]
        or "already spent" in (by_id["flaw"]["reasoning"])
    )
    assert reward["total"] == pytest.approx(0.5 - 1.0)


def test_time_budget_is_shared_by_the_report_criteria():
    slow = {"type": "regex", "pattern": "(a|a)*$"}
    crits = [{"id": f"c{i}", "text": "t", "weight": 1.0, "grader": slow} for i in range(6)]
    rubric = parse_rubric({"id": "slow", "criteria": crits})
    t0 = time.monotonic()
    r = score_deterministic(rubric, HOSTILE, time_limit_s=0.2)
    wall = time.monotonic() - t0
    assert [c.verdict for c in r.criteria] == ["Not Satisfied"] * 6
    assert all("undecided" in (c.reasoning or "") for c in r.criteria)
    # the first match spends the budget; the other five start none
    assert ["already spent" in (c.reasoning or "") for c in r.criteria] == [False] + [True] * 5
    assert wall < 6 * 0.2  # one budget for the report, not one per criterion


def test_compiling_a_pattern_is_not_counted_in_the_report_budget(monkeypatch):
    """A busy machine's compile times must not change a verdict: each compile here takes longer than
    the whole budget, and every criterion is still decided (matching takes microseconds)."""
    from agentrl.judge import bounds

    real = bounds.compile_pattern

    def slow(pattern: str, ignore_case: bool):  # type: ignore[no-untyped-def]
        time.sleep(0.15)
        return real(pattern, ignore_case)

    monkeypatch.setattr(bounds, "compile_pattern", slow)
    crits = [
        {"id": f"c{i}", "text": "t", "weight": 1.0, "grader": {"type": "regex", "pattern": p}}
        for i, p in enumerate(["a+b", "^a", "b$", "q"])
    ]
    r = score_deterministic(parse_rubric({"id": "compile", "criteria": crits}), HOSTILE, time_limit_s=0.1)
    assert [c.verdict for c in r.criteria] == ["Fully Satisfied"] * 3 + ["Not Satisfied"]
    assert not any(c.reasoning for c in r.criteria)


def test_llm_judge_path_grades_undecided_criteria_the_same_way(monkeypatch):
    monkeypatch.setattr("agentrl.judge.bounds.REPORT_TIME_LIMIT_S", 0.2)  # the default budget, shorter
    rubric = parse_rubric(catastrophic_rubric())
    traj = make_trajectory(HOSTILE)
    with Judge(JudgeConfig()) as judge:
        via_judge = asyncio.run(judge.score(traj, rubric))
    direct = score_deterministic(rubric, HOSTILE)
    verdicts = [(c.id, c.verdict, c.score) for c in direct.criteria]
    assert [(c.id, c.verdict, c.score) for c in via_judge.criteria] == verdicts
    assert via_judge.total == direct.total == pytest.approx(-0.5)


def test_report_over_the_cap_gets_the_worst_verdicts():
    rubric = load_rubric(ROOT / "rubrics" / "alphabet-2025-q1-cloud-offline.yaml")
    pad = " " * (MAX_REPORT_CHARS - len(GOOD_REPORT))
    opened = evidence_of(make_trajectory(GOOD_REPORT))  # the agent opened the page it cites
    assert score_deterministic(rubric, GOOD_REPORT + pad, evidence=opened).total == 2.5  # at the cap: read
    over = score_deterministic(rubric, GOOD_REPORT + pad + " ", evidence=opened)
    assert over.total == 0.0 and over.status == "ok"
    assert all("graders read at most 50000" in c.reasoning for c in over.criteria)
    flaw = parse_rubric(
        {
            "id": "n",
            "criteria": [
                {"id": "p", "text": "t", "weight": 1.0, "grader": {"type": "contains", "text": "x"}},
                {
                    "id": "f",
                    "kind": "negative",
                    "text": "t",
                    "weight": -1.0,
                    "grader": {"type": "contains", "text": "q"},
                },
            ],
        }
    )
    # A flaw hidden after the cap still counts: the penalty applies to an over-long report.
    assert score_deterministic(flaw, "x" + " " * MAX_REPORT_CHARS + "q").total == -1.0


def _sandbox_patterns() -> list[tuple[str, bool]]:
    from agentrl.env.suite import load_suite

    suite = load_suite("sandbox")
    seen: dict[tuple[str, bool], None] = {}
    for task in suite.tasks[:80]:
        for c in parse_rubric(suite.rubric_data(task)).criteria:
            if c.grader.type == "regex":
                seen[(c.grader.pattern, c.grader.ignore_case)] = None
    for path in sorted((ROOT / "rubrics").glob("*.yaml")) + sorted((ROOT / "envs").rglob("*.yaml")):
        try:
            r = load_rubric(path)
        except Exception:  # env.yaml and other non-rubric files
            continue
        for c in r.criteria:
            if c.grader.type == "regex":
                seen[(c.grader.pattern, c.grader.ignore_case)] = None
    return list(seen)


def test_regex_engine_agrees_with_re_on_shipped_patterns():
    # The graders moved from ``re`` to ``regex``: on every shipped pattern both give the same answer.
    patterns = _sandbox_patterns()
    assert len(patterns) >= 5
    reports = [
        GOOD_REPORT,
        GOSSIP_REPORT,
        "",
        "Q1 2025: $12.3bn \\cite{x}",
        "first-quarter of 2025 not yet out",
    ]
    for pattern, ignore_case in patterns:
        crit = parse_rubric(
            {
                "id": "r",
                "criteria": [
                    {
                        "id": "c",
                        "text": "t",
                        "weight": 1,
                        "grader": {"type": "regex", "pattern": pattern, "ignore_case": ignore_case},
                    }
                ],
            }
        ).criteria[0]
        for rep in reports:
            expected = re.search(pattern, rep, re.IGNORECASE if ignore_case else 0) is not None
            got = grade_criterion(crit, rep, "strict").verdict == "Fully Satisfied"
            assert got == expected, (pattern, rep)


def test_a_match_the_engine_timed_out_spends_the_whole_budget(monkeypatch):
    """The engine's timeout fires on its own clock, which can run a little ahead of ours: the time
    measured around the call may be a hair under the budget (a fresh clone's run on a busy machine
    left three of six criteria starting a match on a budget of microseconds). A timed-out match
    leaves nothing, so the next criterion starts none."""
    from agentrl.judge import bounds

    class EngineClockAhead:
        def search(self, text: str, timeout: float) -> None:
            raise TimeoutError("regex timed out")

    monkeypatch.setattr(bounds, "compile_pattern", lambda pattern, ignore_case: EngineClockAhead())
    budget = bounds.Budget(0.2)
    with pytest.raises(bounds.Undecided, match="ran out"):
        bounds.bounded_search("x", False, "text", budget)
    assert budget.left == 0.0
    with pytest.raises(bounds.Undecided, match="already spent"):
        bounds.bounded_search("x", False, "text", budget)
