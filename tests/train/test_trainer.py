"""The trainer end to end on the sandbox with a tiny model: GRPO and PPO steps, outputs, exact resume,
config errors, and a zero learning rate that leaves the policy unchanged."""

import json

import pytest
import torch
import yaml

from agentrl.errors import ConfigError
from agentrl.train import TrainConfig, Trainer, load_train_config
from agentrl.trajectory import read_trajectories

TINY = {
    "model": {"path": "tiny:layers=1,hidden=32,heads=2,kv_heads=1", "tokenizer_vocab_size": 600},
    "rollout": {
        "tasks_per_step": 2,
        "group_size": 2,
        "max_turns": 2,
        "max_new_tokens": 12,
        "max_len": 2048,
        "env": {"search_k": 2, "page_chars": 300, "system_prompt": "Today is {date}. Tools: {tools}"},
    },
    "algorithm": {"mini_batch_size": 2, "micro_batch_tokens": 4096},
    "optim": {"lr": 1e-3, "critic_lr": 1e-3},
    "steps": 2,
    "sft_steps": 2,
}


def _cfg(tmp_path, **over):
    data = json.loads(json.dumps(TINY))
    for key, value in over.items():
        cur = data
        *parents, last = key.split(".")
        for p in parents:
            cur = cur.setdefault(p, {})
        cur[last] = value
    data["output_dir"] = str(tmp_path / "run")
    return TrainConfig.model_validate(data)


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


def test_resume_continues_exactly(tmp_path):
    straight = Trainer(_cfg(tmp_path / "a", **{"algorithm.name": "ppo"}), progress=False)
    straight.run()
    first = Trainer(_cfg(tmp_path / "b", **{"algorithm.name": "ppo", "steps": 1}), progress=False)
    first.run()
    resumed = Trainer(_cfg(tmp_path / "b", **{"algorithm.name": "ppo"}), progress=False)
    resumed.run(resume=True)
    for a, b in zip(straight.model.state_dict().values(), resumed.model.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    for a, b in zip(straight.critic.state_dict().values(), resumed.critic.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    rows_a = [json.loads(x) for x in (tmp_path / "a" / "run" / "metrics.jsonl").read_text().splitlines()]
    rows_b = [json.loads(x) for x in (tmp_path / "b" / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows_b) == 2
    for key in ("critic/score/mean", "actor/pg_loss", "critic/vf_loss"):
        assert rows_a[1][key] == rows_b[1][key]


def test_zero_learning_rate_leaves_the_policy_unchanged(tmp_path):
    cfg = _cfg(tmp_path, **{"optim.lr": 0.0, "sft_steps": 0, "steps": 1})
    t = Trainer(cfg, progress=False)
    t.setup()
    before = {k: v.clone() for k, v in t.model.state_dict().items()}
    t.train_step()
    assert all(torch.equal(before[k], v) for k, v in t.model.state_dict().items())


def test_config_errors_name_file_line_and_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"algorithm": {"name": "grpo", "gama": 0.9}}, sort_keys=False))
    with pytest.raises(ConfigError, match=r"bad\.yaml:3:3: algorithm\.gama: Extra inputs"):
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
    assert t.ref is None and t.uses_ref
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
