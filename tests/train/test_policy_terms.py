"""The update's policy loss as configured: ``algorithm.policy_loss`` (vanilla or GSPO), the rollout
correction's IS weights and rejection, ``overlong.mask_truncated`` and the overlong penalty; each
checked on a hand batch against the Python loops of ``tests.reference_algos``."""

from __future__ import annotations

import pytest
import torch

from agentrl.algos import overlong_penalty
from agentrl.algos.rollout_correction import parse_rs_options
from agentrl.learn.advantages import compute_advantages
from agentrl.train.config import AlgorithmConfig
from agentrl.train.update import forward_logprobs, update_actor
from tests.reference_algos import policy_loss_python, rollout_correction_python
from tests.train.test_update import _batch, _models, _trajectories
from tests.train.test_update import tok as tok  # the fixture


def _hand_batch(tok, seed=0):
    """Six trajectories on a tiny model: old log-probs 0.2 off the model's, the sampler's another
    0.3 off, random advantages on the policy tokens."""
    batch = _batch(tok, _trajectories(tok, n=6, seed=seed))
    actor, _ = _models(tok, seed=seed)
    g = torch.Generator().manual_seed(seed)
    mask = batch["loss_mask"].float()
    with torch.no_grad():
        lp, _ = forward_logprobs(actor, batch)
    batch["old_logprobs"] = (lp + 0.2 * torch.randn(lp.shape, generator=g)) * mask
    batch["rollout_logprobs"] = (batch["old_logprobs"] + 0.3 * torch.randn(lp.shape, generator=g)) * mask
    batch["known_logprobs"] = batch["loss_mask"].clone()
    batch["advantages"] = torch.randn(lp.shape, generator=g) * mask
    return actor, batch, lp


def _pg_loss(actor, batch, cfg):
    """``actor/pg_loss`` of one optimiser step on the whole batch (lr 0: the weights stay)."""
    cfg = cfg.model_copy(update={"mini_batch_size": len(batch["input_ids"]), "micro_batch_tokens": 100_000})
    return update_actor(actor, torch.optim.SGD(actor.parameters(), lr=0.0), batch, cfg)


def _lists(batch, lp):
    return batch["old_logprobs"].tolist(), lp.tolist(), batch["advantages"].tolist()


@pytest.mark.parametrize("kind", ["vanilla", "gspo"])
def test_the_configured_policy_loss_is_the_one_trained_on(tok, kind):
    actor, batch, lp = _hand_batch(tok)
    cfg = AlgorithmConfig(policy_loss=kind, clip_low=0.2, clip_high=0.28, clip_c=3.0)
    m = _pg_loss(actor, batch, cfg)
    old, new, adv = _lists(batch, lp)
    mask = batch["loss_mask"].tolist()
    want = policy_loss_python(old, new, adv, mask, 0.2, 0.28, clip_c=3.0 if kind == "vanilla" else None,
                              sequence=kind == "gspo")  # fmt: skip
    other = policy_loss_python(old, new, adv, mask, 0.2, 0.28, clip_c=3.0 if kind == "gspo" else None,
                               sequence=kind == "vanilla")  # fmt: skip
    assert m["actor/pg_loss"] == pytest.approx(want, rel=1e-4)
    assert abs(want - other) > 1e-3  # the hand batch tells the two losses apart


def test_rollout_correction_weights_and_rejects_in_the_policy_loss(tok):
    actor, batch, lp = _hand_batch(tok, seed=1)
    rs, rs_thr = "token_k2,seq_max_k3", "0.05,0.5"
    rc = {
        "rollout_is": "token",
        "rollout_is_threshold": 1.3,
        "rollout_rs": rs,
        "rollout_rs_threshold": rs_thr,
    }
    m = _pg_loss(actor, batch, AlgorithmConfig(clip_c=None, rollout_correction=rc))
    old, new, adv = _lists(batch, lp)
    mask = batch["loss_mask"].tolist()
    w, keep, ref = rollout_correction_python(
        old, batch["rollout_logprobs"].tolist(), mask, "token", 1.3, parse_rs_options(rs, rs_thr)
    )
    kept = [[m_ * k for m_, k in zip(mr, kr, strict=True)] for mr, kr in zip(mask, keep, strict=True)]
    assert 0 < ref["rollout_rs_masked_fraction"] < 1  # some tokens rejected, not all
    assert m["actor/pg_loss"] == pytest.approx(
        policy_loss_python(old, new, adv, kept, 0.2, 0.28, weights=w), rel=1e-4
    )
    assert m["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(ref["rollout_rs_masked_fraction"])
    assert m["rollout_corr/kl"] == pytest.approx(ref["kl"], rel=1e-5)
    # without the correction the loss is the plain one
    plain = _pg_loss(actor, batch, AlgorithmConfig(clip_c=None))
    assert plain["actor/pg_loss"] == pytest.approx(
        policy_loss_python(old, new, adv, mask, 0.2, 0.28), rel=1e-4
    )
    assert "rollout_corr/kl" not in plain


def test_unknown_sampler_logprobs_are_neither_weighted_nor_rejected(tok):
    actor, batch, lp = _hand_batch(tok, seed=2)
    batch["known_logprobs"] = torch.zeros_like(batch["loss_mask"])
    rc = {"rollout_is": "sequence", "rollout_rs": "token_k3", "rollout_rs_threshold": 1e-6}
    m = _pg_loss(actor, batch, AlgorithmConfig(clip_c=None, rollout_correction=rc))
    old, new, adv = _lists(batch, lp)
    assert m["actor/pg_loss"] == pytest.approx(
        policy_loss_python(old, new, adv, batch["loss_mask"].tolist(), 0.2, 0.28), rel=1e-4
    )


def test_mask_truncated_leaves_truncated_episodes_out_of_the_loss(tok):
    actor, batch, lp = _hand_batch(tok, seed=3)
    batch["truncated"] = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0])
    m = _pg_loss(actor, batch, AlgorithmConfig(clip_c=None, overlong={"mask_truncated": True}))
    old, new, adv = _lists(batch, lp)
    mask = [
        row if not t else [0] * len(row)
        for row, t in zip(batch["loss_mask"].tolist(), [1, 0, 0, 1, 0, 0], strict=True)
    ]
    assert m["actor/pg_loss"] == pytest.approx(policy_loss_python(old, new, adv, mask, 0.2, 0.28), rel=1e-4)
    assert m["actor/masked_truncated"] == pytest.approx(2 / 6)


def test_overlong_penalty_by_hand():
    # max 20, buffer 5: no penalty up to 15, then linear to −factor at 20
    got = overlong_penalty(torch.tensor([10, 15, 16, 18, 20]), 20, 5, 0.5)
    assert got.tolist() == pytest.approx([0.0, 0.0, -0.1, -0.3, -0.5])


def test_the_overlong_penalty_is_added_on_the_last_policy_token(tok):
    trajs = _trajectories(tok, n=4, seed=4)
    batch = _batch(tok, trajs)
    mask = batch["loss_mask"]
    lengths = mask.sum(-1)
    cfg = AlgorithmConfig(name="grpo", overlong={"enable": True, "len": 4, "penalty_factor": 1.0,
                                                 "max_tokens": int(lengths.max())})  # fmt: skip
    m = compute_advantages(batch, cfg, [t.task_id for t in trajs])
    shaped = batch["token_level_rewards"] - batch["token_level_scores"]
    start = int(lengths.max()) - 4
    for row, n in enumerate(lengths.tolist()):
        last = max(t for t in range(mask.shape[1]) if mask[row, t])
        want = min(0.0, -(n - start) / 4)
        assert shaped[row, last].item() == pytest.approx(want)
        assert shaped[row].abs().sum().item() == pytest.approx(abs(want))
    assert m["overlong/penalized_frac"] > 0


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step")
def test_the_trainer_applies_every_option_from_the_config(tmp_path, monkeypatch):
    """A real step with every option on: the update gets the configured algorithm, and its numbers
    are the ones those options give, recomputed here from what the update was fed (the rollout
    correction by the Python loop, the overlong penalty by hand, the truncated share by counting)."""
    import agentrl.train.trainer as trainer_module
    from agentrl.train import Trainer
    from tests.train.learning_signal import assert_learning_signal, train_config

    over = {
        "sft_steps": 0,
        "algorithm.policy_loss": "gspo",
        "algorithm.rollout_correction": {"rollout_is": "sequence", "rollout_rs": "token_k3",
                                         "rollout_rs_threshold": 0.5},
        "algorithm.overlong": {"enable": True, "len": 20, "penalty_factor": 0.5, "mask_truncated": True},
    }  # fmt: skip
    fed: dict = {}
    real_update, real_advantages = trainer_module.update_actor, trainer_module.compute_advantages

    def update_actor(model, opt, batch, cfg, **kw):
        fed["update"] = ({k: v.detach().clone() for k, v in batch.items()}, cfg)
        return real_update(model, opt, batch, cfg, **kw)

    def compute_advantages(batch, cfg, *a, **kw):
        fed["advantages"] = cfg
        return real_advantages(batch, cfg, *a, **kw)

    monkeypatch.setattr(trainer_module, "update_actor", update_actor)
    monkeypatch.setattr(trainer_module, "compute_advantages", compute_advantages)
    t = Trainer(train_config(tmp_path, **over), progress=False)
    assert t.cfg.algorithm.overlong.max_tokens == 2 * 12  # max_turns × max_new_tokens
    t.setup()
    m = t.train_step()
    assert_learning_signal(tmp_path / "run")
    batch, cfg = fed["update"]
    assert cfg is t.cfg.algorithm and fed["advantages"] is t.cfg.algorithm and cfg.policy_loss == "gspo"
    assert all(v == v for v in m.values())  # no NaN
    # The overlong penalty: DAPO's, with L_exp = 24 − 20, factor 0.5, on each row's policy tokens.
    lengths = batch["loss_mask"].sum(-1).tolist()
    penalties = [min(0.0, -(n - 4) / 20 * 0.5) for n in lengths]
    assert m["overlong/penalty_mean"] == pytest.approx(sum(penalties) / len(penalties), abs=1e-6)
    assert any(p < 0 for p in penalties)  # some episode reached the buffer: the option had work
    # mask_truncated: the share of rows cut by a budget, all of them left out of the loss.
    from agentrl.trajectory import read_trajectories

    trajs = list(read_trajectories(tmp_path / "run" / "trajectories" / "step_00001.jsonl"))
    cut = [t.info.get("truncated_reason") is not None and not t.info.get("terminated") for t in trajs]
    # (this fixture's answering model answers every episode: the share is 0 here, and
    # test_mask_truncated_leaves_truncated_episodes_out_of_the_loss pins the masking itself)
    assert m["actor/masked_truncated"] == pytest.approx(sum(cut) / len(cut))
    # The rollout correction: the Python loop on the sampler's and the trainer's old log-probs.
    known = (batch["loss_mask"] * batch["known_logprobs"]).tolist()
    _, _, ref = rollout_correction_python(
        batch["old_logprobs"].tolist(), batch["rollout_logprobs"].tolist(), known, "sequence", 2.0,
        parse_rs_options("token_k3", 0.5),
    )  # fmt: skip
    assert m["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(ref["rollout_rs_masked_fraction"])
    assert m["rollout_corr/kl"] == pytest.approx(ref["kl"], rel=1e-4, abs=1e-9)
    # the trainer's recomputed old log-probs against the sampler's: the same model, a tiny gap
    assert 0 < abs(m["rollout_corr/kl"]) < 1e-3  # 0 exactly if old were the sampler's
