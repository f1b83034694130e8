"""``agentrl replay --rubric/--judge-model``: per-criterion deltas against the stored scores, the
rubric hash on every new verdict, and a repeat run that the verdict cache makes free."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrl.cli import main
from agentrl.judge import JudgeConfig, load_rubric, score_deterministic
from agentrl.judge.prompt import judge_input
from agentrl.trajectory import read_trajectories
from tests.judge.fake_server import FakeJudgeServer

ROOT = Path(__file__).resolve().parents[2]

STRICT = r"""
id: replay-strict
version: 2
mapping: strict
aggregation: weighted_sum
criteria:
  - id: accuracy
    text: Gives $12.3 billion.
    weight: 2.0
    grader: {type: regex, pattern: '\$\s?12\.3\s*billion'}
  - id: citation
    text: Cites sources in \cite{} format.
    weight: 0.5
    grader: {type: regex, pattern: '\\cite\{[^}]+\}'}
  - id: no_trillion
    kind: negative
    text: States a trillion-dollar figure.
    weight: -1.0
    grader: {type: contains, text: trillion}
"""

LLM = r"""
id: replay-llm
version: 1
criteria:
  - id: figure
    text: States the figure `12.3 billion`.
    weight: 1.0
  - id: caveat
    text: Says the full-year report has `not been published`.
    weight: 1.0
  - id: citation
    text: Cites sources in \cite{} format.
    weight: 0.5
    grader: {type: regex, pattern: '\\cite\{[^}]+\}'}
"""


def _json(capsys, *argv):
    assert main(["replay", *map(str, argv), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_deltas_against_a_different_deterministic_rubric(recorded, tmp_path, capsys):
    traj, _ = recorded
    rubric_path = tmp_path / "strict.yaml"
    rubric_path.write_text(STRICT)
    rubric = load_rubric(rubric_path)
    out = tmp_path / "rescored.jsonl"
    rep = _json(capsys, traj, "--rubric", rubric_path, "--no-judge-cache", "--out", out)["rescore"]

    stored = {t.id: t for t in read_trajectories(traj)}
    new = {t.id: t for t in read_trajectories(out)}
    # Hand-checked: the gossip report loses accuracy and shows the flaw, the good one doubles accuracy.
    assert new["alphabet-2025-cloud#1"].reward.total == pytest.approx(0 + 0.5 - 1.0)
    assert new["alphabet-2025-cloud#0"].reward.total == pytest.approx(2.0 + 0.5)
    for tid, t in new.items():
        assert t.reward.rubric_hash == rubric.content_hash
        assert {c.rubric_hash for c in t.reward.criteria} == {rubric.content_hash}
        assert t.info["rescored_from"]["total"] == (stored[tid].reward.total if stored[tid].reward else None)
        assert t.reward.total == pytest.approx(score_deterministic(rubric, t.final_report()).total)

    both = [tid for tid in stored if stored[tid].reward is not None]  # the LLM-rubric task was unscored
    assert rep["compared"] == len(both) == 4 and rep["trajectories"] == 6
    old_mean = sum(stored[t].reward.total for t in both) / 4
    new_mean = sum(new[t].reward.total for t in both) / 4
    assert rep["old_mean"] == pytest.approx(old_mean) and rep["new_mean"] == pytest.approx(new_mean)
    assert rep["delta"] == pytest.approx(new_mean - old_mean)
    crit = {c["id"]: c for c in rep["criteria"]}
    assert set(crit) == {"accuracy", "temporal", "citation", "no_trillion"}

    def scores(trajs, cid):
        return [c.score for t in both for c in trajs[t].reward.criteria if c.id == cid]

    for cid in ("accuracy", "citation"):
        o, n = scores(stored, cid), scores(new, cid)
        assert crit[cid]["old_mean"] == pytest.approx(sum(o) / 4)
        assert crit[cid]["new_mean"] == pytest.approx(sum(n) / 4)
        assert crit[cid]["delta"] == pytest.approx((sum(n) - sum(o)) / 4)
    assert crit["accuracy"]["weight_old"] == 1.0 and crit["accuracy"]["weight_new"] == 2.0
    assert crit["temporal"]["new_mean"] is None and crit["temporal"]["weight_new"] is None  # removed
    assert crit["no_trillion"]["old_mean"] is None and crit["no_trillion"]["kind"] == "negative"  # added
    assert crit["no_trillion"]["new_mean"] == pytest.approx(1 / 4)  # only the gossip report

    # The table says the same in words.
    assert main(["replay", str(traj), "--rubric", str(rubric_path), "--no-judge-cache"]) == 0
    table = capsys.readouterr().out
    assert "no_trillion" in table and "(added)" in table and "(removed)" in table and "1→2" in table
    assert rubric.content_hash[:16] in table

    # Every compared trajectory was scored under its task's own rubric, not this one: said so.
    ids = [stored[t].reward.rubric_id for t in both]
    assert (
        rep["other_rubrics"] == {i: ids.count(i) for i in set(ids)}
        and sum(rep["other_rubrics"].values()) == 4
    )
    assert "note: 4 of 4 were scored under another rubric (" in table
    assert all(f"{i} ({ids.count(i)})" in table for i in set(ids))


def test_the_tasks_own_rubric_draws_no_other_rubric_note(recorded, tmp_path, capsys):
    """Re-scored under the rubric that scored them (each task's own): nothing to warn about."""
    traj, _ = recorded
    rep = _json(
        capsys, traj, "--rubric", ROOT / "envs/alphabet-2025/rubrics/cloud-offline.yaml", "--no-judge-cache"
    )
    own = [
        t for t in read_trajectories(traj) if t.reward and t.reward.rubric_id == "alphabet-2025-cloud-offline"
    ]
    assert own and rep["rescore"]["other_rubrics"] == {
        "alphabet-q4-2024-cloud": rep["rescore"]["compared"] - len(own)
    }


def test_llm_rescore_repeat_makes_no_judge_calls(recorded, tmp_path, capsys):
    traj, _ = recorded
    rubric_path = tmp_path / "llm.yaml"
    rubric_path.write_text(LLM)
    rubric = load_rubric(rubric_path)
    cache = tmp_path / "verdicts.sqlite"
    with FakeJudgeServer() as server:
        argv = [traj, "--rubric", rubric_path, "--judge-model", "good:replay", "--api-base", server.url]
        first = _json(capsys, *argv, "--judge-cache", cache, "--out", tmp_path / "a.jsonl")["rescore"]
        # Identical judge inputs (the same task, sources and report) are judged once.
        c = JudgeConfig()
        inputs = [
            judge_input(
                t,
                include_sources=c.include_sources,
                source_tools=c.source_tools,
                max_source_chars=c.max_source_chars,
            ).hash
            for t in read_trajectories(traj)
        ]
        distinct = len(set(inputs))
        assert len(inputs) == 6 and server.counts["good:replay"] == distinct == first["calls"]
        assert first["cache_hits"] == 2 * (6 - distinct)  # the copies share their original's verdicts
        second = _json(capsys, *argv, "--judge-cache", cache, "--out", tmp_path / "b.jsonl")["rescore"]
        assert server.counts["good:replay"] == distinct, "the repeat reached the judge"
        assert second["calls"] == 0 and second["cache_hits"] == 12  # 2 LLM criteria × 6 trajectories
    assert first["criteria"] == second["criteria"] and first["rubric_hashes"] == [rubric.content_hash]
    crit = {c["id"]: c for c in second["criteria"]}
    # Of the 4 reports scored before and after, only the good Q1 one says `12.3 billion`.
    assert crit["figure"]["new_mean"] == pytest.approx(0.25) and crit["figure"]["old_mean"] is None
    for t in read_trajectories(tmp_path / "b.jsonl"):
        llm = [c for c in t.reward.criteria if c.grader == "llm"]
        assert len(llm) == 2 and all(c.rubric_hash == rubric.content_hash for c in llm)
        assert all(c.judge_model == "good:replay" for c in llm)
