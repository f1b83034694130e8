"""Evaluation during training with the tiny answering model (``tests.train.learning_signal``):

- a run with evaluations and audits trains exactly as the same run without them (metrics and
  weights), and stores what it evaluated: val/... metrics (step 0 before RL), RUN/eval and RUN/audit
  files, eval_before/eval_after/eval_gain/audit in summary.json, the eval curve; the summary's gain
  is what ``agentrl eval compare`` says of the two files, and ``agentrl eval --policy hf:RUN``
  samples the trained run;
- a run whose suite has no held-out split is refused before anything is written;
- the audit judge catches a hack: the training judge pays for a short report, the policy learns to
  say almost nothing, the audit judge (it wants a figure) sees its reward fall, and the divergence
  warning fires.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from agentrl.cli import main
from agentrl.env.sandbox import build
from agentrl.errors import ConfigError
from agentrl.rollout.episode import episode_seed
from agentrl.train import TrainConfig, Trainer
from agentrl.trajectory import read_trajectories
from tests.train.learning_signal import config_dict

HERE = Path(__file__).parent
FIGURE = str(HERE / "figure_rubric.yaml")
BREVITY = str(HERE / "brevity_rubric.yaml")
EVAL = {
    "before_train": True,
    "every": 1,
    "at_end": True,
    "n": 2,
    "limit": 3,
    "audit": {"rubric": FIGURE, "every": 1, "sample": 2, "window": 3},
}


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> Path:
    """Two training companies and one held-out company."""
    out = tmp_path_factory.mktemp("heldout-suite")
    build(out, seed=7, companies=2, heldout=1)
    return out


def _config(suite: Path, out: Path, **over) -> TrainConfig:
    base = {"rollout.suite": str(suite), "output_dir": str(out), "sft_steps": 1, "sft_episodes": 8}
    return TrainConfig.model_validate(config_dict(**(base | over)))


@pytest.fixture(scope="module")
def runs(suite, tmp_path_factory):
    """The same run without and with evaluation: (trainer, run dir) each."""
    root = tmp_path_factory.mktemp("eval-runs")
    warmup = {"optim.warmup_steps": 3}  # the learning rate changes every step: a stray schedule step shows
    off = Trainer(_config(suite, root / "off", **warmup), progress=False)
    off.run()
    on = Trainer(_config(suite, root / "on", eval=EVAL, **warmup), progress=False)
    on.run()
    return (off, root / "off"), (on, root / "on")


def _rows(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def test_evaluation_changes_nothing_the_run_trains(runs):
    (off, off_dir), (on, on_dir) = runs
    rows_off, rows_on = _rows(off_dir), _rows(on_dir)
    assert [r["step"] for r in rows_on] == [0, 1, 2] and [r["step"] for r in rows_off] == [1, 2]
    for a, b in zip(rows_off, rows_on[1:], strict=True):
        for key, value in a.items():
            if not key.startswith(("timing_s/", "perf/")):
                assert b[key] == value, key
    assert rows_off[1]["actor/grad_norm"] > 0  # the runs trained: equal weights are no accident
    assert rows_off[0]["actor/lr"] != rows_off[1]["actor/lr"]
    for k, v in off.model.state_dict().items():
        assert torch.equal(v, on.model.state_dict()[k]), k
    for step in (1, 2):  # and the training episodes are the same episodes
        same = [read_trajectories(d / "trajectories" / f"step_{step:05d}.jsonl") for d in (off_dir, on_dir)]
        assert [t.messages for t in same[0]] == [t.messages for t in same[1]]


def test_evaluations_are_logged_stored_and_summarised(runs, suite):
    (_, _), (_, run) = runs
    rows = _rows(run)
    name = suite.name
    for r in rows:  # before RL, after step 1 and after the last step
        assert {f"val-core/{name}/reward/mean@2", f"val-core/{name}/reward/best@2/mean", "val/reward/mean",
                "val/reward/ci_low", "val/reward/ci_high", "val/pass@1", "val/pass@2", "val/episodes",
                "val-audit/train_mean", "val-audit/audit_mean", "val-audit/flip_rate"} <= set(r)  # fmt: skip
        assert r["val/reward/ci_low"] <= r["val/reward/mean"] <= r["val/reward/ci_high"]
        assert r["val/episodes"] == 6.0 and r["val/tasks"] == 3.0
    assert all("audit/train_mean" in r and r["audit/episodes"] == 2.0 for r in rows[1:])
    assert "audit/divergence" in rows[2]  # window 3: checked from the third audited point on
    files = sorted((run / "eval").iterdir())
    assert [f.name for f in files] == ["step_00000.jsonl", "step_00001.jsonl", "step_00002.jsonl"]
    heldout = [json.loads(x) for x in (suite / "tasks.jsonl").read_text().splitlines()]
    tasks = [t["id"] for t in heldout if t.get("split") == "heldout"][:3]
    for f in files:
        trajs = list(read_trajectories(f))
        assert [t.id for t in trajs] == [f"{task}#{s}" for task in tasks for s in range(2)]
        assert all(t.info["seed"] == episode_seed(0, t.task_id, t.info["sample"]) for t in trajs)
        assert all("audit_reward" in t.info and t.reward.status == "ok" for t in trajs)
    assert sorted(p.name for p in (run / "audit").iterdir()) == ["step_00001.jsonl", "step_00002.jsonl"]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 2
    assert summary["eval_before"]["step"] == 0 and summary["eval_after"]["step"] == 2
    assert summary["eval_before"]["reward"]["mean"] == pytest.approx(rows[0]["val/reward/mean"])
    assert summary["eval_after"]["reward"]["mean"] == pytest.approx(rows[2]["val/reward/mean"])
    gain = summary["eval_gain"]
    assert gain["pairs"] == 6 and gain["difference"]["mean"] == pytest.approx(
        summary["eval_after"]["reward"]["mean"] - summary["eval_before"]["reward"]["mean"]
    )
    # the flag at step 2 is the check over the three evaluations' audited means (window 3), slopes by
    # np.polyfit; the summary's flag is whether any row's fired
    fits = [np.polyfit([0, 1, 2], [r[f"val-audit/{k}_mean"] for r in rows], 1)[0] for k in ("train", "audit")]
    fires = bool(fits[0] > 0 and fits[1] < 0 and (fits[0] - fits[1]) * 2 >= 0.1)
    assert rows[2]["audit/divergence"] == float(fires)
    assert rows[2]["val-audit/train_slope"] == pytest.approx(fits[0])
    assert summary["audit"]["divergence"] is fires and "val-audit" in summary["audit"]
    assert summary["audit"]["first_divergence_step"] == (2 if fires else None)
    assert (run / "reward_curve.png").read_bytes()[:4] == b"\x89PNG"


def test_the_summary_gain_is_what_eval_compare_says(runs, capsys):
    (_, _), (_, run) = runs
    gain = json.loads((run / "summary.json").read_text())["eval_gain"]
    assert main(["eval", "compare", str(run / "eval" / "step_00000.jsonl"), str(run)]) == 0
    cli = json.loads(capsys.readouterr().out)
    for key in ("pairs", "tasks", "a_mean", "b_mean", "difference", "p_value", "criteria"):
        assert cli[key] == gain[key], key


def test_report_draws_the_evaluation(runs, tmp_path):
    (_, _), (_, run) = runs
    assert main(["report", str(run), "--out", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert "Evaluation (95% interval over tasks)" in page and "eval gain, after − before (paired)" in page


def test_eval_samples_a_trained_run(runs, suite, tmp_path, capsys):
    (_, _), (_, run) = runs
    out = tmp_path / "hf.jsonl"
    argv = ["eval", "--suite", str(suite), "--split", "heldout", "--policy", f"hf:{run}", "--max-tokens", "12",
            "-n", "2", "--limit", "2", "--no-progress", "--device", "cpu", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    card = json.loads(capsys.readouterr().out)
    assert card["episodes"] == 4 and card["tasks"] == 2 and card["policies"] == [f"hf:{run}"]
    assert all(m.token_ids for t in read_trajectories(out) for m in t.messages if m.role == "assistant")


def test_eval_of_a_run_samples_what_its_evaluation_sampled(runs, suite, tmp_path, capsys):
    """``agentrl eval --policy hf:RUN`` with the run's eval seed, split, tasks and samples draws the
    episodes the run's own last evaluation drew, token for token: the run's recorded sampling spec
    (max_len, max_new_tokens, temperature) and context policy, and its env (``rollout.env``: here a
    system prompt of its own), not the hf: policy's and the suite's defaults. (Scores may differ:
    the run's judge has a rubric override that ``agentrl eval`` does not take.)"""
    from agentrl.eval.compare import pair_key

    (_, _), (_, run) = runs
    out = tmp_path / "again.jsonl"
    argv = ["eval", "--suite", str(suite), "--split", "heldout", "--policy", f"hf:{run}", "-n", "2",
            "--limit", "3", "--seed", "0", "--no-progress", "--device", "cpu", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    last = max(int(f.stem.split("_")[1]) for f in (run / "eval").glob("step_*.jsonl"))
    ran = {pair_key(t): t for t in read_trajectories(run / "eval" / f"step_{last:05d}.jsonl")}
    again = {pair_key(t): t for t in read_trajectories(out)}
    assert ran.keys() == again.keys() and len(ran) == 6

    def sampled(t):
        return [m.token_ids for m in t.messages if m.role == "assistant"]

    assert all(sampled(ran[k]) == sampled(again[k]) for k in ran), "the eval drew other tokens"
    # and the env answered them alike: the run's prompt, tools and budgets (its rollout.env)
    assert all([m.content for m in ran[k].messages] == [m.content for m in again[k].messages] for k in ran)
    # what the run samples with is part of the resume check: an --out sampled otherwise is not resumed
    from agentrl.rollout.resume import params_path

    stored = json.loads(params_path(out).read_text())["params"]["hf:RUN sampling"]
    assert stored["spec"] == json.loads((run / "sampling.json").read_text())
    assert stored["context"]["strategy"] == "none" and stored["eval_temperature"] is None
    # an env.yaml given with --config merges into the run's env, section by section
    import argparse

    from agentrl.cli.rollout import _config, _run_sampling

    env_yaml = tmp_path / "env.yaml"
    env_yaml.write_text("budgets: {tool_timeout_s: 30}\n")
    ns = dict(config=str(env_yaml), suite=None, split=None, cache=None, cache_path=None, send_tools=None,
              judge_model=None, out=str(out), policy=f"hf:{run}")  # fmt: skip
    cfg = _config(argparse.Namespace(**ns), _run_sampling(ns["policy"]))
    assert cfg["budgets"] == {"max_turns": 2, "tool_timeout_s": 30}
    assert cfg["system_prompt"] == "Today is {date}. Tools: {tools}"


def test_a_suite_without_heldout_tasks_is_refused_before_anything_is_written(tmp_path):
    suite = tmp_path / "suite"
    build(suite, seed=7, companies=2)
    out = tmp_path / "run"
    cfg = _config(suite, out, eval={"at_end": True})
    with pytest.raises(ConfigError, match=r"no 'heldout' split .*its splits: train \(22\).*eval\.suite"):
        Trainer(cfg, progress=False).run()
    assert not out.exists()
    from agentrl.train.evaluation import check_evaluation

    check_evaluation(_config(suite, out, eval={"at_end": True, "split": "train"}), {"suite": str(suite)})
    with pytest.raises(
        ConfigError, match=r"^eval\.split: suite .* no tasks in split 'heldout'"
    ):  # set explicitly
        check_evaluation(
            _config(suite, out, eval={"at_end": True, "split": "heldout"}), {"suite": str(suite)}
        )


def test_the_audit_catches_a_policy_hacking_the_training_judge(suite, tmp_path, capsys):
    """The training judge (``judge.rubric``) pays for a report of at most 12 characters; the audit
    judge pays for a figure. The tiny policy learns to answer in a word: the training reward rises,
    the audit reward falls, and the divergence check fires within five steps."""
    cfg = _config(
        suite, tmp_path / "run", sft_steps=0, steps=5, **{"judge.rubric": BREVITY, "rollout.group_size": 4},
        **{"optim.lr": 3e-3, "eval": {"audit": {"rubric": FIGURE, "every": 1, "sample": 8, "window": 4}}},
    )  # fmt: skip
    summary = Trainer(cfg, progress=False).run()
    rows = _rows(tmp_path / "run")
    train = [r["audit/train_mean"] for r in rows]
    audit = [r["audit/audit_mean"] for r in rows]
    # over steps 2-5 (the audit scores 8 sampled episodes a step: one step's mean moves by 0.125s)
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    assert mean(train[1:]) > train[0] + 0.3 and mean(audit[1:]) < audit[0] - 0.2, (train, audit)
    fired = [r["step"] for r in rows if r.get("audit/divergence") == 1.0]
    assert fired and summary["audit"]["divergence"] and summary["audit"]["first_divergence_step"] == fired[0]
    err = capsys.readouterr().err
    assert "warning: audit divergence on sampled training episodes" in err and "AUDIT DIVERGENCE" in err


def test_an_evaluation_leaves_the_global_random_states_as_it_found_them():
    """Whatever an evaluation draws from Python's, numpy's or torch's global generators, the training
    that follows draws what it would have drawn without it."""
    import random
    from types import SimpleNamespace

    import numpy as np

    from agentrl.train.evaluation import evaluate_after_step
    from agentrl.train.progress import Progress

    class Greedy:  # an evaluation that consumes every global generator
        def due(self, step):
            return True

        def audit_due(self, step):
            return True

        def evaluate(self, step):
            return {"val/x": random.random() + float(np.random.rand()) + torch.rand(1).item()}

        def audit_step(self, step):
            return {"audit/x": random.random() + torch.rand(1).item()}

    trainer = SimpleNamespace(evaluation=Greedy(), report=Progress())
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    assert set(evaluate_after_step(trainer, 3)) == {"val/x", "audit/x"}
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected


def test_the_evaluation_samples_at_its_own_temperature(suite, tmp_path):
    """``eval.temperature`` changes the evaluation's sampling only; everything else of the run's
    sampling spec (stop ids, limits, top-p) is the training rollouts'."""
    from agentrl.train.evaluation import _engine_rollout

    t = Trainer(_config(suite, tmp_path / "run", **{"eval": {"temperature": 0.25}}), progress=False)
    t.setup()
    try:
        ev, train = _engine_rollout(t).__self__.loop, t.engine.loop  # type: ignore[attr-defined]
        assert ev.temperature == 0.25 and train.temperature == t.cfg.rollout.temperature != 0.25
        assert (ev.stop_ids, ev.limits, ev.top_p) == (train.stop_ids, train.limits, train.top_p)
    finally:
        t.pool.shutdown(wait=False)
        t.judge.close()
