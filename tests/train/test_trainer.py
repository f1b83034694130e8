"""The trainer end to end on the sandbox with a tiny model: GRPO and PPO steps, outputs, exact resume,
config errors, a zero learning rate that leaves the policy and critic unchanged where a positive one
moves them, and a critic that learns. Runs score with ``learning_signal``'s rubric, so rewards vary
within a group and every update has a non-zero gradient."""

import json

import pytest
import torch
import yaml

from agentrl.errors import ConfigError
from agentrl.train import TrainConfig, Trainer, load_train_config
from agentrl.trajectory import read_trajectories
from tests.train.learning_signal import TINY, assert_learning_signal
from tests.train.learning_signal import train_config as _cfg

__all__ = ["TINY"]  # older test modules import the tiny config from here


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_train_writes_metrics_trajectories_checkpoints_and_summary(tmp_path, algo):
    cfg = _cfg(tmp_path, **{"algorithm.name": algo})
    summary = Trainer(cfg, progress=False).run()
    out = tmp_path / "run"
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1.0, 2.0]
    keys = {
        "critic/score/mean",
        "critic/advantages/mean",
        "actor/pg_loss",
        "actor/entropy",
        "actor/grad_norm",
    }
    assert keys <= set(rows[0]), set(rows[0])
    if algo == "ppo":
        assert {"critic/vf_loss", "critic/vf_explained_var", "critic/vf_clipfrac"} <= set(rows[0])
    trajs = list(read_trajectories(out / "trajectories" / "step_00001.jsonl"))
    assert len(trajs) == 4 and all(t.info["step"] == 1 for t in trajs)
    sampled = [m for t in trajs for m in t.messages if m.role == "assistant"]
    assert sampled and all(m.token_ids and len(m.logprobs) == len(m.token_ids) for m in sampled)
    assert (out / "checkpoints" / "step_00002" / "state.pt").exists()
    assert (out / "reward_curve.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((out / "summary.json").read_text())["steps"] == 2
    assert TrainConfig.model_validate(json.loads((out / "config.json").read_text())) == cfg
    assert summary["steps"] == 2 and "reward_gain" in summary
    assert_learning_signal(out, 1)
    assert_learning_signal(out, 2)
    _check_token_stats(out, trajs, algo)


def _check_token_stats(out, trajs, algo):
    from transformers import AutoTokenizer

    from agentrl.rundir import read_token_stats
    from agentrl.tokens import Expander

    stats = read_token_stats(out / "tokens" / "step_00001.npz")
    expander = Expander(AutoTokenizer.from_pretrained(out / "tokenizer"), max_len=2048)
    trained = [t for t in trajs if t.reward is not None and t.reward.status == "ok"]
    assert set(stats) == {t.id for t in trained}
    for t in trained:
        row, entry = expander.expand(t), stats[t.id]
        assert entry["positions"].tolist() == row.loss_mask.nonzero()[0].tolist()
        n = len(entry["positions"])
        assert all(len(v) == n for v in entry.values())
        assert entry["token_level_scores"][-1] == pytest.approx(t.reward.total)  # normalized == total here
        assert entry["token_level_scores"][:-1].tolist() == [0.0] * (n - 1)
        if algo == "ppo":
            assert {"values", "returns", "raw_advantages"} <= set(entry)
            # returns = raw advantages + values (before whitening)
            assert entry["returns"] == pytest.approx(entry["raw_advantages"] + entry["values"], abs=1e-5)
        else:
            assert len(set(entry["advantages"].tolist())) == 1  # GRPO: one advantage per trajectory


def _rows(run_dir):
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _differs(a: dict, b: dict) -> bool:
    return any(not torch.equal(v, b[k]) for k, v in a.items())


def test_resume_continues_exactly(tmp_path):
    """PPO killed after step 1 and resumed equals the uninterrupted run: the same weights, critic and
    metrics at step 2, where the step-2 update really moved both models (non-zero losses)."""
    ppo = {"algorithm.name": "ppo", "checkpoint_every": 1}
    straight = Trainer(_cfg(tmp_path / "a", **ppo), progress=False)
    straight.run()
    first = Trainer(_cfg(tmp_path / "b", **ppo, steps=1), progress=False)
    first.run()
    resumed = Trainer(_cfg(tmp_path / "b", **ppo), progress=False)
    resumed.run(resume=True)
    run_a, run_b = tmp_path / "a" / "run", tmp_path / "b" / "run"
    for step in (1, 2):
        assert_learning_signal(run_a, step)
    for name in ("model", "critic"):
        ours = getattr(resumed, name).state_dict()
        for k, v in getattr(straight, name).state_dict().items():
            assert torch.equal(v, ours[k]), (name, k)
    # Step 2 moved the policy and the critic: the runs agree on an update that changed something.
    at_1 = torch.load(run_a / "checkpoints" / "step_00001" / "state.pt", weights_only=False)
    assert _differs(at_1["model"], straight.model.state_dict())
    assert _differs(at_1["critic"], straight.critic.state_dict())
    rows_a, rows_b = _rows(run_a), _rows(run_b)
    assert len(rows_b) == 2
    for key in (
        "critic/score/mean", "critic/advantages/max", "critic/rewards/mean", "actor/pg_loss",
        "actor/grad_norm", "actor/ppo_kl", "critic/vf_loss", "critic/grad_norm",
    ):  # fmt: skip
        assert rows_a[1][key] == rows_b[1][key], key
    assert rows_a[1]["actor/grad_norm"] > 1e-6  # (PPO's on-policy pg_loss is −mean(whitened A) ≈ 0)
    assert rows_a[1]["critic/vf_loss"] > 0 and rows_a[1]["critic/grad_norm"] > 0


def _one_step(tmp_path, lr: float):
    """One PPO step with actor and critic learning rate ``lr``, from fresh (unwarmed) models;
    returns its metrics and whether the policy and the critic changed."""
    over = {"algorithm.name": "ppo", "optim.lr": lr, "optim.critic_lr": lr, "sft_steps": 0, "steps": 1}
    t = Trainer(_cfg(tmp_path, **over), progress=False)
    t.setup()
    model = {k: v.clone() for k, v in t.model.state_dict().items()}
    critic = {k: v.clone() for k, v in t.critic.state_dict().items()}
    m = t.train_step()
    assert_learning_signal(t.out, 1)
    # The step had a gradient to follow: only the learning rate decides whether weights move.
    assert m["actor/grad_norm"] > 1e-6
    assert m["critic/vf_loss"] > 0 and m["critic/grad_norm"] > 0
    return m, _differs(model, t.model.state_dict()), _differs(critic, t.critic.state_dict())


def test_zero_learning_rate_leaves_the_policy_and_critic_unchanged(tmp_path):
    m, model_moved, critic_moved = _one_step(tmp_path, 0.0)
    assert m["actor/lr"] == 0.0
    assert not model_moved and not critic_moved


def test_a_positive_learning_rate_moves_the_policy_and_critic(tmp_path):
    """The pair of the zero-learning-rate control: the same step with lr > 0 changes both models."""
    m, model_moved, critic_moved = _one_step(tmp_path, 1e-3)
    assert m["actor/lr"] == 1e-3
    assert model_moved and critic_moved


def test_ppo_critic_moves_its_values_toward_the_returns(tmp_path):
    """One PPO step: the critic's values on the step's own tokens change, and their squared error to
    the step's returns goes down (the value head starts at V = 0, the returns are not all 0)."""
    from agentrl.learn.batch import build_batch
    from agentrl.learn.forward import forward_values
    from agentrl.rundir import read_token_stats

    over = {"algorithm.name": "ppo", "optim.critic_lr": 1e-2, "sft_steps": 0, "steps": 1}
    t = Trainer(_cfg(tmp_path, **over), progress=False)
    t.setup()
    before = {k: v.clone() for k, v in t.critic.state_dict().items()}
    m = t.train_step()
    assert_learning_signal(t.out, 1)
    assert m["critic/vf_loss"] > 0
    trajs = list(read_trajectories(t.out / "trajectories" / "step_00001.jsonl"))
    keep, batch, _ = build_batch(trajs, t.expander, normalize=True, pad_id=t.pad_id, device=t.device)
    stats = read_token_stats(t.out / "tokens" / "step_00001.npz")
    mask = batch["loss_mask"].bool()
    returns = torch.zeros(mask.shape)
    for i, traj in enumerate(keep):
        entry = stats[traj.id]
        returns[i, torch.from_numpy(entry["positions"])] = torch.from_numpy(entry["returns"])
    assert returns[mask].abs().max() > 0.1
    with torch.no_grad():
        after = forward_values(t.critic, batch)[mask]
        t.critic.load_state_dict(before)
        start = forward_values(t.critic, batch)[mask]
    assert start.abs().max() == 0  # V = 0 before the first update
    assert (after - start).abs().max() > 1e-3
    assert ((after - returns[mask]) ** 2).mean() < ((start - returns[mask]) ** 2).mean()


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_a_step_raises_the_likelihood_of_the_better_samples(tmp_path, algo):
    """The update climbs the reward: after one step, the log-likelihood of each sample changes in
    the direction of its reward relative to its group (Σ (r − mean) / std · Δ log π > 0), with
    rewards read from the judged trajectories, not from the trainer's own advantages."""
    from collections import defaultdict

    from agentrl.learn.batch import build_batch
    from agentrl.learn.forward import forward_logprobs

    # A small step (Adam's first step moves every weight by about lr): the first-order gain
    # lr * sum|g| is then the whole change; at the fixture's 1e-3 the second-order terms of a tiny
    # model decide the sign for some draws.
    over = {
        "algorithm.name": algo,
        "algorithm.mini_batch_size": 4,
        "sft_steps": 0,
        "steps": 1,
        "optim.lr": 1e-5,
    }
    t = Trainer(_cfg(tmp_path, **over), progress=False)
    t.setup()
    before = {k: v.clone() for k, v in t.model.state_dict().items()}
    t.train_step()
    assert_learning_signal(t.out, 1)
    trajs = list(read_trajectories(t.out / "trajectories" / "step_00001.jsonl"))
    keep, batch, _ = build_batch(trajs, t.expander, normalize=True, pad_id=t.pad_id, device=t.device)
    mask = batch["loss_mask"]
    with torch.no_grad():
        after = (forward_logprobs(t.model, batch)[0] * mask).sum(-1)
        t.model.load_state_dict(before)
        start = (forward_logprobs(t.model, batch)[0] * mask).sum(-1)
    groups = defaultdict(list)
    for traj in keep:
        groups[traj.task_id].append(traj.reward.total)
    gain = 0.0
    for i, traj in enumerate(keep):
        rewards = torch.tensor(groups[traj.task_id])
        if rewards.std() > 0:
            gain += (traj.reward.total - rewards.mean()) / rewards.std() * (after[i] - start[i])
    assert gain > 0, gain


def test_config_errors_name_file_line_and_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"algorithm": {"name": "grpo", "gama": 0.9}}, sort_keys=False))
    with pytest.raises(
        ConfigError, match=r"bad\.yaml:3:3: algorithm\.gama: not a setting; did you mean 'gamma'\?"
    ):
        load_train_config(path)
    path.write_text("rollout:\n  group_size: 1\n")
    with pytest.raises(ConfigError, match="group_size must be ≥ 2"):
        load_train_config(path)
    path.write_text("steps: 3\n")
    assert load_train_config(path, {"optim.lr": 0, "steps": 5}).steps == 5
    with pytest.raises(ConfigError, match="no such file"):
        load_train_config(tmp_path / "missing.yaml")


def test_lora_policy_with_the_base_model_as_reference(tmp_path):
    pytest.importorskip("peft")
    cfg = _cfg(tmp_path, **{"model.lora_rank": 4, "algorithm.kl_loss_coef": 0.1, "sft_steps": 0, "steps": 1})
    t = Trainer(cfg, progress=False)
    t.setup()
    assert t.ref is None and t.models.uses_ref
    with torch.no_grad():  # move the adapters off zero, so that the policy differs from its base
        for k, v in t.model.named_parameters():
            if "lora_B" in k:
                v.normal_(0, 0.5, generator=torch.Generator().manual_seed(0))
    frozen = {k: v.clone() for k, v in t.model.named_parameters() if not v.requires_grad}
    adapters = {k: v.clone() for k, v in t.model.named_parameters() if v.requires_grad}
    assert frozen and adapters and all("lora" in k for k in adapters)
    metrics = t.train_step()
    assert metrics["actor/kl_loss"] > 0  # KL to the adapter-free base, which the loss pulls toward
    params = dict(t.model.named_parameters())
    assert all(torch.equal(v, params[k]) for k, v in frozen.items())  # the base never moves
    assert any(not torch.equal(v, params[k]) for k, v in adapters.items())


def test_a_step_with_nothing_trainable_skips_the_update(tmp_path, monkeypatch):
    cfg = _cfg(tmp_path, **{"sft_steps": 0, "steps": 1})
    t = Trainer(cfg, progress=False)
    t.setup()
    before = {k: v.clone() for k, v in t.model.state_dict().items()}
    # Every trajectory comes back from the judge as a judge error: dropped, counted, never scored 0.
    from agentrl.trajectory import RewardBreakdown

    def all_errors(trajs):
        for traj in trajs:
            traj.reward = RewardBreakdown(total=None, status="judge_error", error="judge unavailable")
        return {}

    monkeypatch.setattr(t.judge, "score", all_errors)
    m = t.train_step()
    assert m["train/dropped_judge_error"] == 4.0 and m["train/skipped_update"] == 1.0
    assert "actor/pg_loss" not in m
    assert all(torch.equal(before[k], v) for k, v in t.model.state_dict().items())
