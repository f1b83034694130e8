"""How ``update_actor``, ``update_critic`` and ``compute_advantages`` apply the rest of the algorithm's
options, each with a test that fails when the option is ignored: the estimator with its γ, λ and
whitening, the KL controller the trainer builds (β, target, horizon), epochs and mini-batches (the
number of optimiser steps), the token budget and packing (the shape of the forward passes), and the
critic's ``vf_coef`` and ``value_clip``. Unit-level on a tiny random model."""

from __future__ import annotations

import pytest
import torch

from agentrl.learn.advantages import compute_advantages
from agentrl.train.config import AlgorithmConfig, TrainConfig
from agentrl.train.update import forward_logprobs, update_actor
from tests.tokens.fixtures import make_tokenizer
from tests.train.test_options import _toy_batch
from tests.train.test_update import _batch, _models, _trajectories


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer("chatml")


# ---- which estimator, and its γ, λ and whitening ------------------------------------------------


@pytest.mark.parametrize("name", ["ppo", "grpo", "rloo", "reinforce_pp"])
@pytest.mark.parametrize("whiten", [True, False])
def test_the_configured_estimator_computes_the_advantages(name, whiten):
    """``compute_advantages`` gives exactly the configured estimator's advantages (each estimator is
    checked against hand values and Python loops in tests/algos), with the configured γ, λ and
    whitening; non-default γ = 0.9, λ = 0.8 so that ignoring either shows."""
    from agentrl.algos import (
        gae,
        grpo_advantages,
        masked_sum,
        masked_whiten,
        reinforce_pp_advantages,
        rloo_advantages,
    )

    g = torch.Generator().manual_seed(0)
    batch = _toy_batch([1.0, 0.0, 3.0, 0.5])
    batch["token_level_scores"][:, 1] = torch.tensor([0.1, -0.2, 0.3, 0.0])  # a turn reward too
    batch["values"] = torch.rand(4, 4, generator=g) * batch["loss_mask"]
    groups = ["a", "a", "b", "b"]
    cfg = AlgorithmConfig(name=name, gamma=0.9, lam=0.8, whiten_advantages=whiten)
    compute_advantages(batch, cfg, groups)
    r, m = batch["token_level_scores"], batch["loss_mask"]
    want = {
        "ppo": lambda: gae(r, batch["values"], m, 0.9, 0.8)[0],
        "grpo": lambda: grpo_advantages(masked_sum(r, m, dim=-1), groups, m),
        "rloo": lambda: rloo_advantages(masked_sum(r, m, dim=-1), groups, m),
        "reinforce_pp": lambda: reinforce_pp_advantages(r, m, 0.9),
    }[name]()
    if name == "ppo" and whiten:
        want = masked_whiten(want, m) * m
    assert torch.allclose(batch["advantages"], want, atol=1e-6)
    others = [n for n in ("ppo", "grpo", "rloo", "reinforce_pp") if n != name]
    for other in others:  # the estimators differ on this batch, so a wrong one cannot pass
        b = {k: v.clone() for k, v in batch.items() if k in ("loss_mask", "token_level_scores", "values")}
        compute_advantages(b, cfg.model_copy(update={"name": other}), groups)
        assert not torch.allclose(b["advantages"], batch["advantages"], atol=1e-4), other


# ---- the KL controller the trainer builds -------------------------------------------------------


def test_the_kl_controller_takes_beta_target_and_horizon_from_the_config(tok):
    from agentrl.train.build import build_models

    base = {"model": {"path": "tiny:layers=1,hidden=32,heads=2,kv_heads=1"}}
    fixed = build_models(
        TrainConfig.model_validate({**base, "algorithm": {"kl_coef": 0.3}}), len(tok), torch.device("cpu")
    ).kl_ctrl
    fixed.update(0.5, 10)
    assert fixed.value == 0.3  # fixed β
    algo = {"kl_coef": 0.3, "kl_target": 0.1, "kl_horizon": 50}
    adaptive = build_models(
        TrainConfig.model_validate({**base, "algorithm": algo}), len(tok), torch.device("cpu")
    ).kl_ctrl
    adaptive.update(0.2, 10)  # KL twice the target: error clipped to 0.2, times 10 / 50
    assert adaptive.value == pytest.approx(0.3 * (1 + 0.2 * 10 / 50))


# ---- how the update batches its work -------------------------------------------------------------


def _counted_update(tok, cfg, n=4):
    """Run ``update_actor`` on ``n`` trajectories; returns the rows of each forward pass and the
    number of optimiser steps taken."""
    trajs = _trajectories(tok, n=n, seed=6)
    last = trajs[0].messages[-1]  # one long row, so that the short ones can share a packed line
    last.token_ids = [*range(30, 130), *last.token_ids]
    batch = _batch(tok, trajs)
    actor, _ = _models(tok, seed=6)
    with torch.no_grad():
        batch["old_logprobs"], _ = forward_logprobs(actor, batch)
    batch["advantages"] = torch.randn(batch["old_logprobs"].shape, generator=torch.Generator().manual_seed(2))
    batch["advantages"] *= batch["loss_mask"]
    rows: list[int] = []
    # the backbone runs once per forward pass (the policy-only head runs on selected positions)
    actor.get_decoder().register_forward_pre_hook(
        lambda mod, args, kwargs: rows.append(kwargs["input_ids"].shape[0]), with_kwargs=True
    )
    opt = torch.optim.SGD(actor.parameters(), lr=1e-3)
    steps = []
    orig = opt.step
    opt.step = lambda *a, **k: (steps.append(1), orig(*a, **k))[1]
    update_actor(actor, opt, batch, cfg, generator=torch.Generator().manual_seed(0))
    return rows, len(steps)


def test_epochs_and_mini_batches_set_the_number_of_optimiser_steps(tok):
    cfg = AlgorithmConfig(name="grpo", mini_batch_size=2, ppo_epochs=3, micro_batch_tokens=100_000)
    _, steps = _counted_update(tok, cfg)
    assert steps == 3 * 2  # 3 epochs × (4 trajectories / 2 per mini-batch)
    _, steps = _counted_update(tok, cfg.model_copy(update={"mini_batch_size": 4, "ppo_epochs": 1}))
    assert steps == 1


def test_the_token_budget_and_packing_shape_the_forward_passes(tok):
    cfg = AlgorithmConfig(name="grpo", mini_batch_size=4, micro_batch_tokens=100_000, pack_sequences=True)
    rows, _ = _counted_update(tok, cfg)
    assert len(rows) == 1 and rows[0] < 4  # one pass; short rows share a line beside the long one
    rows, _ = _counted_update(tok, cfg.model_copy(update={"pack_sequences": False}))
    assert rows == [4]  # padded rows, one pass
    # A budget the packed rows fit and the padded ones do not: packing counts real tokens.
    rows, _ = _counted_update(tok, cfg.model_copy(update={"micro_batch_tokens": 500}))
    assert len(rows) == 1
    rows, _ = _counted_update(
        tok, cfg.model_copy(update={"micro_batch_tokens": 500, "pack_sequences": False})
    )
    assert len(rows) > 1
    rows, _ = _counted_update(
        tok, cfg.model_copy(update={"pack_sequences": False, "micro_batch_tokens": 200})
    )
    assert len(rows) > 1 and sum(rows) == 4  # fewer rows at a time, within the token budget


# ---- the critic's loss ----------------------------------------------------------------------------


def _critic_grad(tok, cfg):
    from agentrl.train.update import forward_values, update_critic

    trajs = _trajectories(tok, n=4, seed=7)
    batch = _batch(tok, trajs)
    _, critic = _models(tok, seed=7)
    with torch.no_grad():
        v = forward_values(critic, batch)
    m = batch["loss_mask"]
    batch["values"] = (v + 0.5) * m  # the rollout's values, 0.5 off: the clip range matters
    batch["returns"] = torch.randn(v.shape, generator=torch.Generator().manual_seed(3)) * m
    opt = torch.optim.SGD(critic.parameters(), lr=0.0)
    got = {}
    orig = opt.step

    def step(*a, **k):
        got["g"] = torch.cat([p.grad.flatten() for p in critic.parameters() if p.grad is not None]).clone()
        return orig(*a, **k)

    opt.step = step
    metrics = update_critic(critic, opt, batch, cfg, grad_clip=1e9)
    return got["g"], metrics


def test_vf_coef_scales_the_critic_gradient_and_value_clip_clips(tok):
    cfg = AlgorithmConfig(name="ppo", mini_batch_size=4, vf_coef=1.0, value_clip=0.2)
    g1, m1 = _critic_grad(tok, cfg)
    g2, m2 = _critic_grad(tok, cfg.model_copy(update={"vf_coef": 2.5}))
    assert torch.allclose(g2, 2.5 * g1, rtol=1e-4, atol=1e-7) and g1.abs().max() > 0
    assert m1["critic/vf_loss"] == pytest.approx(m2["critic/vf_loss"])  # the metric is the unscaled loss
    _, off = _critic_grad(tok, cfg.model_copy(update={"value_clip": None}))
    assert m1["critic/vf_clipfrac"] > 0 and off["critic/vf_clipfrac"] == 0
    assert m1["critic/vf_loss"] > off["critic/vf_loss"]  # max(unclipped, clipped) ≥ unclipped, here >


# ---- the policy loss's clip range and the KL loss -----------------------------------------------


@pytest.mark.parametrize(
    ("kind", "clips"), [("vanilla", (0.1, 0.15, 1.5)), ("gspo", (0.003, 0.004, None))]
)  # fmt: skip
def test_the_policy_loss_uses_the_configured_clip_range(tok, kind, clips):
    """Non-default clip_low, clip_high and clip_c (vanilla) or GSPO's own scale: the loss trained on
    is the Python loop's with those values, and differs from the loss with the defaults."""
    from tests.reference_algos import policy_loss_python
    from tests.train.test_policy_terms import _hand_batch, _lists, _pg_loss

    actor, batch, lp = _hand_batch(tok, seed=4)
    low, high, c = clips
    cfg = AlgorithmConfig(policy_loss=kind, clip_low=low, clip_high=high, clip_c=c)
    m = _pg_loss(actor, batch, cfg)
    old, new, adv = _lists(batch, lp)
    mask = batch["loss_mask"].tolist()
    want = policy_loss_python(old, new, adv, mask, low, high, clip_c=c, sequence=kind == "gspo")
    default = policy_loss_python(old, new, adv, mask, 0.2, 0.28, clip_c=3.0 if kind == "vanilla" else None,
                                 sequence=kind == "gspo")  # fmt: skip
    assert m["actor/pg_loss"] == pytest.approx(want, rel=1e-4)
    assert abs(want - default) > 1e-3 * max(abs(want), 1e-3)  # the clip values matter on this batch


@pytest.mark.parametrize("kind", ["k1", "k3"])
def test_the_kl_loss_is_coef_times_kl_of_the_policy_from_the_reference(tok, kind):
    """Zero advantages: the gradient is that of kl_loss_coef · token-mean KL(π ‖ π_ref), computed
    here from one padded forward. A swapped π and π_ref, or a coefficient not applied, changes it."""
    trajs = _trajectories(tok, n=4, seed=9)
    batch = _batch(tok, trajs)
    actor, _ = _models(tok, seed=9)
    m = batch["loss_mask"].float()
    with torch.no_grad():
        batch["old_logprobs"], _ = forward_logprobs(actor, batch)
    g = torch.Generator().manual_seed(4)
    batch["ref_logprobs"] = (batch["old_logprobs"] + 0.5 * torch.randn(m.shape, generator=g)) * m
    batch["advantages"] = torch.zeros_like(m)
    cfg = AlgorithmConfig(name="grpo", mini_batch_size=4, kl_loss_coef=0.3, kl_kind=kind)
    logits = actor(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()
    lp = torch.log_softmax(logits[:, :-1], -1).gather(-1, batch["input_ids"][:, 1:, None])[..., 0]
    lp = torch.cat([torch.zeros(len(lp), 1), lp], dim=1)
    diff = lp - batch["ref_logprobs"]  # log π − log π_ref
    kl = diff if kind == "k1" else torch.exp(-diff) + diff - 1
    (0.3 * (kl * m).sum() / m.sum()).backward()
    want = torch.cat([p.grad.flatten() for p in actor.parameters() if p.grad is not None]).clone()
    actor.zero_grad(set_to_none=True)
    opt = torch.optim.SGD(actor.parameters(), lr=0.0)
    got = {}
    orig = opt.step

    def step(*a, **k):
        got["g"] = torch.cat([p.grad.flatten() for p in actor.parameters() if p.grad is not None]).clone()
        return orig(*a, **k)

    opt.step = step
    update_actor(actor, opt, batch, cfg, grad_clip=1e9)
    assert want.abs().max() > 1e-4
    assert torch.allclose(got["g"], want, atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize("normalize", [True, False])
def test_batch_normalised_is_weights_average_one_over_the_batch(tok, normalize):
    from agentrl.learn.policy_terms import actor_batch
    from tests.train.test_policy_terms import _hand_batch

    _, batch, _ = _hand_batch(tok, seed=5)
    rc = {"rollout_is": "token", "rollout_is_threshold": 5.0, "rollout_is_batch_normalize": normalize}
    out, _ = actor_batch(batch, AlgorithmConfig(rollout_correction=rc))
    m = batch["loss_mask"].float()
    w = out["rollout_is_weights"]
    mean = float((w * m).sum() / m.sum())
    raw = torch.exp(batch["old_logprobs"] - batch["rollout_logprobs"]).clamp(max=5.0)
    assert abs(float((raw * m).sum() / m.sum()) - 1) > 1e-2  # the raw weights do not average 1 here
    if normalize:
        assert mean == pytest.approx(1.0, abs=1e-5)
    else:
        assert torch.allclose((w * m), raw * m, atol=1e-5)


# ---- where the old log-probs come from ----------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "top_p", "recomputed", "forward"),
    [("never", 1.0, False, False), ("always", 1.0, True, True), ("auto", 1.0, False, True), ("auto", 0.9, True, True)],
)  # fmt: skip
def test_old_logprobs_are_the_samplers_or_recomputed_as_configured(tok, mode, top_p, recomputed, forward):
    """``recompute_old_logprobs``: never = the sampler's (no forward pass when all are known), always =
    the trainer's, auto = the sampler's unless they are inexact (here: sampled with top-p < 1)."""
    from types import SimpleNamespace

    from agentrl.train.trainer import Trainer

    cfg = TrainConfig.model_validate(
        {"algorithm": {"recompute_old_logprobs": mode}, "rollout": {"top_p": top_p},
         "model": {"path": "tiny:layers=1,hidden=32,heads=2,kv_heads=1"}}
    )  # fmt: skip
    batch = _batch(tok, _trajectories(tok, n=3, seed=8))
    actor, _ = _models(tok, seed=8)
    with torch.no_grad():
        model_lp, _ = forward_logprobs(actor, batch)
    sampler = (model_lp + 0.3) * batch["loss_mask"]
    batch["old_logprobs"] = sampler.clone()
    batch["known_logprobs"] = batch["loss_mask"].clone()
    t = SimpleNamespace(
        cfg=cfg, device=torch.device("cpu"), model=actor, models=SimpleNamespace(uses_ref=False), critic=None
    )
    m = Trainer._forward_passes(t, batch)
    on = batch["loss_mask"].bool()
    want = model_lp if recomputed else sampler
    assert torch.allclose(batch["old_logprobs"][on], want[on], atol=1e-5)
    assert ("actor/rollout_logprob_diff" in m) == forward
    if forward:
        assert m["actor/rollout_logprob_diff"] == pytest.approx(0.3, abs=1e-4)
