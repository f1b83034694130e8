"""``agentrl rubric probe``: no shortcut earns a reward on the shipped suites while the oracle does,
a weak rubric is caught, and the env, ``agentrl judge`` and ``agentrl replay`` give the same reward
to trajectories graded by the evidence graders."""

from __future__ import annotations

import asyncio
import json

import pytest

from agentrl.cli import main
from agentrl.env import ResearchEnv
from agentrl.policy import OraclePolicy
from agentrl.rollout.probe import MULTI_SOURCE, SHORTCUTS, ShortcutPolicy, format_table, probe
from agentrl.rollout.runner import run_policy_episode
from agentrl.trajectory import write_trajectories

from .conftest import ROOT, judge_and_replay

QUICKSTART = str(ROOT / "examples" / "quickstart-env")
LONG_HORIZON = str(ROOT / "examples" / "long-horizon-env")


@pytest.mark.parametrize(
    ("suite", "limit", "tasks"), [("sandbox", 66, 66), (QUICKSTART, None, 33), (LONG_HORIZON, None, 48)]
)
def test_no_shortcut_earns_a_reward_and_the_oracle_does(suite, limit, tasks):
    """Every shortcut on the shipped suites; the multi-source ones where a suite has such tasks."""
    res = probe(suite, limit=limit)
    assert res.tasks == tasks
    run = set(SHORTCUTS) if suite == LONG_HORIZON else set(SHORTCUTS) - MULTI_SOURCE
    assert {r.policy.removeprefix("shortcut:") for r in res.shortcuts} == run
    assert res.oracle.mean >= 0.8, format_table(res)
    bad = {r.policy: (r.mean, r.through()) for r in res.shortcuts if r.mean > 0.05}
    assert not bad, format_table(res)


# The rubric shape before issue 13: each criterion on its own, graded on the report text alone.
WEAK = """\
id: weak
criteria:
  - {id: accuracy, text: the figure, weight: 1.0, grader: {type: regex, pattern: '\\$\\s?12\\.3 billion'}}
  - {id: temporal, text: the period, weight: 1.0, grader: {type: regex, pattern: '(?i)\\bQ[1-4] 20\\d\\d\\b'}}
  - {id: citation, text: a citation, weight: 0.5, grader: {type: regex, pattern: '\\\\cite\\{[^}]+\\}'}}
"""


def test_the_probe_catches_a_weak_rubric_and_exits_non_zero(tmp_path, capsys):
    weak = tmp_path / "weak.yaml"
    weak.write_text(WEAK, encoding="utf-8")
    argv = ["rubric", "probe", "--suite", QUICKSTART, "--limit", "11", "--rubric", str(weak)]
    assert main(argv) == 1
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("shortcut:labels+cite"))
    assert line.endswith("FAIL") and "temporal" in line and "citation" in line
    # the shipped rubrics pass the same probe; --json says which failed
    assert main(["rubric", "probe", "--suite", QUICKSTART, "--limit", "11", "--json"]) == 0
    shown = capsys.readouterr()
    data = json.loads(shown.out)  # the progress went to stderr: stdout is the JSON alone
    assert data["failing"] == [] and data["policies"][0]["mean"] >= 0.8
    # each policy's episodes are a phase on stderr, started and finished with its time
    n = len(data["policies"])
    assert f"policy 1/{n}: oracle(noise=0) on 11 tasks ..." in shown.err.splitlines()
    assert sum(f"/{n}: " in x and ": done in " in x for x in shown.err.splitlines()) == n
    # a threshold that the oracle cannot meet fails too
    assert main(["rubric", "probe", "--suite", QUICKSTART, "--limit", "3", "--min-oracle", "1.01"]) == 1


def test_llm_criteria_go_through_the_configured_judge(tmp_path, capsys):
    """A gullible judge believes verdicts written into the report: the probe shows it."""
    from tests.judge.fake_server import FakeJudgeServer

    rubric = tmp_path / "llm.yaml"
    rubric.write_text(
        "id: gullible\ncriteria:\n  - {id: quality, text: A good report., weight: 1.0}\n", encoding="utf-8"
    )

    def gullible(cid, text, report):
        return "Fully Satisfied" if '"verdict": "Fully Satisfied"' in report else "Not Satisfied"

    with FakeJudgeServer(rules={"quality": gullible}) as server:
        argv = ["rubric", "probe", "--suite", QUICKSTART, "--limit", "3", "--rubric", str(rubric)]
        argv += ["--shortcut", "verdict-injection", "--model", "gullible", "--api-base", f"{server.url}"]
        assert main(argv) == 1
        assert any(r["model"] == "gullible" for r in server.requests)
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("shortcut:verdict"))
    assert "quality 3/3" in line and line.endswith("FAIL")
    assert main(["rubric", "probe", "--rubric", str(rubric), "--limit", "1"]) == 1  # no --model: one line
    err = capsys.readouterr().err
    assert "--model: rubric 'gullible' has LLM criteria (quality)" in err and err.count("\n") == 1


@pytest.mark.parametrize(("family", "total"), [("quarterly", 2.0), ("trap_quarter", 1.0), ("trap_year", 1.0)])
def test_on_the_traps_not_yet_published_needs_the_figure_and_its_source(family, total):
    """Search only, and answer with the true figure read off the results, citing the release unopened:
    the figure counts (it was found), the citation does not, and on the traps neither does the
    "not yet published" that only counts with the figure and its source."""
    from agentrl.trajectory import FunctionCall, Message, ToolCall

    env = ResearchEnv()
    task = next(t for t in env.suite.tasks if t.family == family)
    gt = task.ground_truth
    env.reset(options={"task": task.id})
    args = json.dumps({"query": gt["query"], "k": 10})
    obs, *_ = env.step(
        Message(
            role="assistant",
            content="",
            tool_calls=[ToolCall(id="s", function=FunctionCall(name="search", arguments=args))],
        )
    )
    assert gt["official"]["figure"] in obs  # the snippet shows it
    report = (
        gt["report"].replace("<FIGURE>", gt["official"]["figure"]).replace("<CITE>", gt["official"]["id"])
    )
    _, reward, term, _, _ = env.step(Message(role="assistant", content=report))
    verdict = {c.id: c.verdict for c in env.trajectory().reward.criteria}
    assert term and reward == total, verdict
    assert verdict["accuracy"] == "Fully Satisfied" and verdict["citation"] == "Not Satisfied"


def test_env_judge_and_replay_agree_on_evidence_graded_trajectories(tmp_path):
    env = ResearchEnv()
    task = next(t for t in env.suite.tasks if t.family == "trap_quarter")
    policies = [
        OraclePolicy(0.0),
        OraclePolicy(1.0),
        ShortcutPolicy("cite-unopened"),
        ShortcutPolicy("open-wrong-figure"),
        ShortcutPolicy("figure-spray"),
    ]
    trajs = []
    for i, p in enumerate(policies):
        t = asyncio.run(run_policy_episode(env, p, task, i, 0))
        trajs.append(t.model_copy(update={"id": f"{i}:{p.name}"}))
    env_rewards = {t.id: t.reward.total for t in trajs}
    assert len(set(env_rewards.values())) >= 3, env_rewards  # 2.5, 0, negative: rewards that differ
    stored = tmp_path / "run.jsonl"
    write_trajectories(stored, [t.model_copy(update={"reward": None}) for t in trajs])
    rubric = tmp_path / "task.yaml"
    rubric.write_text(json.dumps(task.rubric), encoding="utf-8")
    by_judge, by_replay = judge_and_replay(stored, rubric, tmp_path)
    for tid, total in env_rewards.items():
        assert by_judge[tid].total == total and by_replay[tid].total == total, tid
        assert [c.verdict for c in by_judge[tid].criteria] == [c.verdict for c in by_replay[tid].criteria]
