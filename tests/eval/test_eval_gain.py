"""Evaluation during training on a policy that changes between evaluations, so the gain, the
schedule and the divergence check have something to show.

The trainer's evaluation hooks (``agentrl.train.evaluation``) drive a real ``Evaluation`` on a
held-out sandbox split, but the policy is scripted: "at step s" it answers ``level(s)`` of each
task's three samples as the oracle does (a full score) and the others with "n/a" (nothing). The
evaluations before and after RL so differ by a known amount (+2/3), checked for its sign, its size
and against a slow recomputation from the stored episodes. With an audit judge that pays for brevity
(which the oracle's long reports lose) the training reward rises while the audit's falls, and the
divergence flag must fire; with one that pays for a figure (which the oracle's reports have) both
rise, and it must not. A run killed in the middle of its audit series resumes to the same rows as
the uninterrupted one: the audited points come back from ``metrics.jsonl``, and a step run again
replaces its point. An ``at_end``-only evaluation runs after the last step, not the one before.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from agentrl.env import ResearchEnv
from agentrl.env.sandbox import build
from agentrl.eval.audit import divergence
from agentrl.eval.config import EvalConfig
from agentrl.eval.during_training import Evaluation, audit_summary, eval_summary
from agentrl.judge import normalized_reward
from agentrl.policy import OraclePolicy
from agentrl.rollout.episode import policy_generate, run_episode
from agentrl.train.evaluation import evaluate_after_step
from agentrl.train.progress import Progress
from agentrl.trajectory import Message, read_trajectories, write_trajectories

HERE = Path(__file__).parent
FIGURE, BREVITY = str(HERE / "figure_rubric.yaml"), str(HERE / "brevity_rubric.yaml")
STEPS, N, TASKS = 3, 3, 3
LEVEL = {0: 0, 1: 1, 2: 2, 3: 2}  # oracle samples per task after each step (0: before RL)


def eval_config(audit: str | None, **over) -> EvalConfig:
    cfg = {"before_train": True, "every": 1, "at_end": True, "n": N, "limit": TASKS, "n_boot": 500}
    if audit is not None:  # every training step audited, all of its episodes (deterministic means)
        cfg["audit"] = {"rubric": audit, "every": 1, "sample": N * TASKS, "window": 3}
    return EvalConfig.model_validate(cfg | over)


class Blank:
    """A policy that answers at once with nothing."""

    name = "blank"

    async def act(self, messages, ctx):  # type: ignore[no-untyped-def]
        body = json.dumps({"name": "answer", "arguments": {"report": "n/a"}})
        return Message(role="assistant", content=f"<tool_call>\n{body}\n</tool_call>")

    async def aclose(self) -> None:
        pass


class Scripted:
    """The policy "at step s": the oracle on the samples below ``level``, blank on the others."""

    def __init__(self) -> None:
        self.level = 0
        self.oracle, self.blank = OraclePolicy(0.0), Blank()

    def rollout(self, envs, specs):  # type: ignore[no-untyped-def]
        async def run() -> list:
            out = []
            for env, spec in zip(envs, specs, strict=True):
                policy = self.oracle if spec.info["sample"] < self.level else self.blank
                out.append((await run_episode(env, spec, policy_generate(policy))).trajectory)
            return out

        return asyncio.run(run())


def evaluation(run: Path, suite: Path, cfg: EvalConfig, policy: Scripted, steps: int = STEPS) -> Evaluation:
    return Evaluation(cfg, run_dir=run, env_config={"suite": str(suite)}, rollout=policy.rollout,
                      score=lambda trajs: None, batch=N * TASKS, steps=steps, seed=0)  # fmt: skip


def train(ev: Evaluation, policy: Scripted, steps: range, env: ResearchEnv, flat: bool = False) -> None:
    """What the trainer's loop does around its evaluation, for RL ``steps`` (0: the evaluation
    before RL): the policy changes, the step's episodes are stored, the hooks run, the row is logged.
    ``flat``: the training episodes stay at level 0 (only the evaluations change)."""
    trainer = SimpleNamespace(evaluation=ev, report=Progress())
    for step in steps:
        if step == 0:
            policy.level = LEVEL[0]
            row = ev.evaluate(0)
        else:
            policy.level = 0 if flat else LEVEL[step]
            episodes = policy.rollout([env] * len(ev.specs(step)), ev.specs(step))
            write_trajectories(ev.run.trajectory_file(step), episodes)
            policy.level = LEVEL[step]
            row = evaluate_after_step(trainer, step)
        ev.run.append_metrics({"step": step, **row})


def summary(ev: Evaluation) -> dict:
    rows = ev.run.metrics()
    return eval_summary(ev.run, STEPS, n_boot=500, seed=0) | {"audit": audit_summary(rows), "rows": rows}


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gain-suite")
    build(out, seed=7, companies=2, heldout=1)
    return out


@pytest.fixture(scope="module")
def runs(suite, tmp_path_factory) -> dict[str, dict]:
    """The whole run with each audit judge: its summary and rows."""
    env = ResearchEnv({"suite": str(suite)})
    out = {}
    for name, rubric in (("brevity", BREVITY), ("figure", FIGURE)):
        policy = Scripted()
        ev = evaluation(tmp_path_factory.mktemp(name), suite, eval_config(rubric), policy)
        train(ev, policy, range(STEPS + 1), env)
        out[name] = summary(ev)
    return out


def _slow_gain(before: Path, after: Path) -> float:
    """The mean over tasks of each task's mean of (after − before) over its samples, by loops."""
    first = {(t.task_id, t.info["sample"]): normalized_reward(t) for t in read_trajectories(before)}
    per_task: dict[str, list[float]] = {}
    for t in read_trajectories(after):
        per_task.setdefault(t.task_id, []).append(normalized_reward(t) - first[(t.task_id, t.info["sample"])])
    return sum(sum(v) / len(v) for v in per_task.values()) / len(per_task)


def test_the_gain_is_after_minus_before_with_its_size(runs):
    s = runs["brevity"]
    before, after = s["eval_before"], s["eval_after"]
    assert (before["step"], after["step"]) == (0, STEPS)
    assert before["reward"]["mean"] == pytest.approx(0.0) and after["reward"]["mean"] == pytest.approx(2 / 3)
    gain = s["eval_gain"]
    slow = _slow_gain(Path(before["file"]), Path(after["file"]))
    assert slow == pytest.approx(2 / 3) and gain["difference"]["mean"] == pytest.approx(slow)
    # every task gained the same: the interval is the point, and the exact two-sided p is 2 / 2^3
    assert gain["difference"]["low"] == pytest.approx(2 / 3) and gain["difference"]["high"] == pytest.approx(
        2 / 3
    )
    assert gain["p_value"] == pytest.approx(2 / 2**TASKS) and gain["pairs"] == N * TASKS
    assert gain["a_mean"] == pytest.approx(0.0) and gain["b_mean"] == pytest.approx(2 / 3)
    rows = s["rows"]
    assert [r["val/reward/mean"] for r in rows] == pytest.approx([LEVEL[k] / N for k in range(STEPS + 1)])
    assert [r["val/pass@1"] for r in rows] == pytest.approx([LEVEL[k] / N for k in range(STEPS + 1)])


def test_the_divergence_flag_fires_where_the_audit_falls_and_not_where_it_rises(runs):
    brevity, figure = runs["brevity"]["rows"], runs["figure"]["rows"]
    # the training judge's mean rises on both; the audit judge's falls with brevity, rises with figures
    assert [r["val-audit/train_mean"] for r in brevity] == pytest.approx([0, 1 / 3, 2 / 3, 2 / 3])
    assert [r["val-audit/audit_mean"] for r in brevity] == pytest.approx([1, 2 / 3, 1 / 3, 1 / 3])
    assert [r["val-audit/audit_mean"] for r in figure] == pytest.approx([0, 1 / 3, 2 / 3, 2 / 3])
    # the check runs from the third point of a series (window 3): on evaluations from step 2, on the
    # audited training steps (1, 2, 3) at step 3
    assert [r.get("audit/divergence") for r in brevity] == [None, None, 1.0, 1.0]
    assert [r.get("audit/divergence") for r in figure] == [None, None, 0.0, 0.0]
    assert runs["brevity"]["audit"]["divergence"] is True
    assert runs["brevity"]["audit"]["first_divergence_step"] == 2
    assert runs["figure"]["audit"]["divergence"] is False
    assert runs["figure"]["audit"]["first_divergence_step"] is None
    # the slopes logged are the least-squares slopes of the window (a slow reference)
    last = brevity[-1]
    x = np.array([1.0, 2.0, 3.0])
    for key, ys in (
        ("audit/train_slope", [1 / 3, 2 / 3, 2 / 3]),
        ("audit/audit_slope", [2 / 3, 1 / 3, 1 / 3]),
    ):
        assert last[key] == pytest.approx(np.polyfit(x, np.array(ys), 1)[0])
    assert "audit/train_slope" not in brevity[2]  # two audited training steps: no check yet


def test_the_steps_flag_is_set_by_either_series(suite, tmp_path):
    """The evaluations' audit falls while the training steps' episodes stay as they were: at step 3
    the evaluation series fires and the training series' check (its first) does not; the step's
    flag is still 1."""
    policy = Scripted()
    ev = evaluation(tmp_path, suite, eval_config(BREVITY), policy)
    train(ev, policy, range(STEPS + 1), ResearchEnv({"suite": str(suite)}), flat=True)
    rows = ev.run.metrics()
    assert (rows[3]["audit/train_slope"], rows[3]["audit/audit_slope"]) == (0.0, 0.0)
    assert rows[3]["val-audit/train_slope"] > 0 > rows[3]["val-audit/audit_slope"]
    assert [r.get("audit/divergence") for r in rows] == [None, None, 1.0, 1.0]


@pytest.mark.parametrize("kept", [2, 3])
def test_a_run_resumed_inside_its_audit_series_logs_what_the_uninterrupted_one_logs(
    runs, suite, tmp_path, kept
):
    """Killed after step ``kept`` was logged; resumed from the checkpoint of step 2, so with
    ``kept = 3`` the log still holds the step the resumed run does again."""
    env = ResearchEnv({"suite": str(suite)})
    policy = Scripted()
    first = evaluation(tmp_path, suite, eval_config(BREVITY), policy)
    train(first, policy, range(kept + 1), env)
    first.close()
    again = evaluation(tmp_path, suite, eval_config(BREVITY), policy)  # a new process: restored points
    assert [p[0] for p in again.auditor.points["train"]] == list(range(1, kept + 1))
    assert [p[0] for p in again.auditor.points["val"]] == list(range(kept + 1))
    rerun = again.run.metrics()[:3]  # the resumed run's log: up to the checkpoint of step 2
    again.run.rewrite_metrics(rerun)
    train(again, policy, range(3, STEPS + 1), env)
    assert [p[0] for p in again.auditor.points["train"]] == [1, 2, 3]  # the step run again replaced its point
    assert [p[0] for p in again.auditor.points["val"]] == [0, 1, 2, 3]
    want, got = runs["brevity"]["rows"][-1], again.run.metrics()[-1]
    for key in want:
        if key.startswith(("audit/", "val-audit/", "val/reward")):
            assert got[key] == pytest.approx(want[key]), key
    check = divergence(again.auditor.points["train"], window=3, min_gap=0.1)
    assert check is not None and check.fires and check.steps == [1, 2, 3]


def test_an_at_end_evaluation_runs_after_the_last_step_only(suite, tmp_path):
    policy = Scripted()
    ev = evaluation(tmp_path, suite, eval_config(None, before_train=False, every=0, at_end=True, n=1), policy)
    assert [ev.due(s) for s in range(STEPS + 2)] == [False, False, False, True, False]
    train(ev, policy, range(1, STEPS + 1), ResearchEnv({"suite": str(suite)}))
    assert sorted(ev.run.eval_files()) == [STEPS]
    rows = ev.run.metrics()
    assert [("val/reward/mean" in r) for r in rows] == [False, False, True]
    done = eval_summary(ev.run, STEPS)
    assert set(done) == {"eval_after"} and done["eval_after"]["step"] == STEPS
    assert done["eval_after"]["reward"]["mean"] == pytest.approx(1.0)  # LEVEL[3] = 2 ≥ the one sample
