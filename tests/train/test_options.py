"""Options that change the numbers of an update, each pinned by a test that fails when the option is
ignored or inverted: GRPO's ``norm_adv_by_std``, KL in the reward (β, estimator, which log-probs),
the entropy bonus's sign, and the optimiser's options as the trainer applies them (learning rate,
its schedule stepping once per update, warm-up, gradient clipping, betas, weight decay). Unit-level,
on a tiny random model: seconds, not a training run."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from agentrl.algos import FixedKLController
from agentrl.learn.advantages import compute_advantages
from agentrl.train.build import lr_lambda
from agentrl.train.config import AlgorithmConfig, OptimConfig, TrainConfig
from agentrl.train.update import forward_logprobs, update_actor
from tests.tokens.fixtures import make_tokenizer
from tests.train.test_update import _batch, _models, _trajectories


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer("chatml")


def _toy_batch(scores: list[float]) -> dict[str, torch.Tensor]:
    """Rows of three policy tokens (a masked prompt token first), the reward on the last one."""
    B = len(scores)
    mask = torch.tensor([[0, 1, 1, 1]] * B)
    s = torch.zeros(B, 4)
    s[:, -1] = torch.tensor(scores)
    return {"loss_mask": mask, "token_level_scores": s}


@pytest.mark.parametrize("norm", [True, False])
def test_grpo_divides_by_the_group_std_only_when_asked(norm):
    batch = _toy_batch([1.0, 0.0, 3.0, 0.0])
    compute_advantages(batch, AlgorithmConfig(name="grpo", norm_adv_by_std=norm), ["a", "a", "b", "b"])
    adv = batch["advantages"][:, 1].tolist()
    if norm:  # (s − mean) / (unbiased std + 1e-6): both groups give ±1/√2, whatever their spread
        want = [
            x / (s + 1e-6) for x, s in ((0.5, 0.5**0.5), (-0.5, 0.5**0.5), (1.5, 4.5**0.5), (-1.5, 4.5**0.5))
        ]
    else:  # Dr. GRPO: s − mean
        want = [0.5, -0.5, 1.5, -1.5]
    assert adv == pytest.approx(want, rel=1e-5)
    assert (batch["advantages"][:, 0] == 0).all() and (
        batch["advantages"][:, 1:] == batch["advantages"][:, 1:2]
    ).all()


@pytest.mark.parametrize(("kind", "kl"), [("k1", 1.0), ("k3", math.exp(-1.0))])
def test_kl_in_the_reward_subtracts_beta_times_kl_of_the_sampler_from_the_reference(kind, kl):
    """log π_old = −1, log π_ref = −2 on every token: k1 = old − ref = 1, k3 = e^(ref−old) + (old−ref) − 1
    = e^−1. Swapping old and ref gives k1 = −1 (a reward bonus) and k3 = e − 2: both caught."""
    batch = _toy_batch([2.0, 0.0])
    batch["old_logprobs"] = torch.full((2, 4), -1.0)
    batch["ref_logprobs"] = torch.full((2, 4), -2.0)
    beta = 0.25
    cfg = AlgorithmConfig(name="grpo", kl_in_reward=True, kl_coef=beta, kl_kind=kind)
    compute_advantages(batch, cfg, ["a", "a"], FixedKLController(cfg.kl_coef))
    want = torch.tensor(
        [[0.0, -beta * kl, -beta * kl, 2.0 - beta * kl], [0.0, -beta * kl, -beta * kl, -beta * kl]]
    )
    assert torch.allclose(batch["token_level_rewards"], want, atol=1e-6)
    # Off: the rewards are the scores.
    off = _toy_batch([2.0, 0.0]) | {
        "old_logprobs": batch["old_logprobs"],
        "ref_logprobs": batch["ref_logprobs"],
    }
    compute_advantages(
        off, cfg.model_copy(update={"kl_in_reward": False}), ["a", "a"], FixedKLController(beta)
    )
    assert torch.equal(off["token_level_rewards"], off["token_level_scores"])


def _entropy(model, batch) -> float:
    with torch.no_grad():
        _, ent = forward_logprobs(model, batch, with_entropy=True)
    m = batch["loss_mask"].float()
    return float((ent * m).sum() / m.sum())


@pytest.mark.parametrize("coef", [0.5, -0.5])
def test_the_entropy_bonus_raises_the_entropy_and_a_negative_one_lowers_it(tok, coef):
    """Zero advantages and no KL: the entropy term is the whole loss, −coef·H, so one SGD step moves
    H up for coef > 0 (the bonus) and down for coef < 0. A flipped sign does the opposite."""
    trajs = _trajectories(tok, n=4, seed=2)
    batch = _batch(tok, trajs)
    actor, _ = _models(tok, seed=3)
    with torch.no_grad():
        batch["old_logprobs"], _ = forward_logprobs(actor, batch)
    batch["advantages"] = torch.zeros_like(batch["old_logprobs"])
    before = _entropy(actor, batch)
    cfg = AlgorithmConfig(name="grpo", mini_batch_size=4, entropy_coef=coef)
    m = update_actor(actor, torch.optim.SGD(actor.parameters(), lr=100.0), batch, cfg, grad_clip=1e9)
    assert m["actor/grad_norm"] > 0
    after = _entropy(actor, batch)
    assert (after - before) * coef > 1e-4, (before, after)


# ---- the optimiser's options, as the trainer applies them ----------------------------------------


def _trainer(tok, optim: dict, lr_opt=None) -> SimpleNamespace:
    """What ``Trainer._update`` reads, built by ``build_models``'s own pieces from ``optim``."""
    from agentrl.train.build import build_models

    cfg = TrainConfig.model_validate(
        {"steps": 4, "optim": optim, "model": {"path": "tiny:layers=1,hidden=32,heads=2,kv_heads=1"}}
    )
    models = build_models(cfg, len(tok), torch.device("cpu"))
    if lr_opt is not None:  # an SGD optimiser in place of AdamW, to read the step's size exactly
        models.opt = lr_opt(models.policy)
        models.sched = torch.optim.lr_scheduler.LambdaLR(models.opt, lr_lambda(cfg.optim, cfg.steps))
    return SimpleNamespace(cfg=cfg, models=models, model=models.policy, critic=None)


def _update_batch(tok, model):
    trajs = _trajectories(tok, n=4, seed=5)
    batch = _batch(tok, trajs)
    with torch.no_grad():
        batch["old_logprobs"], _ = forward_logprobs(model, batch)
    batch["advantages"] = torch.randn(batch["old_logprobs"].shape, generator=torch.Generator().manual_seed(0))
    batch["advantages"] *= batch["loss_mask"]
    return batch


def test_the_trainer_steps_the_schedule_once_per_update(tok):
    from agentrl.train.trainer import Trainer

    t = _trainer(tok, {"lr": 1e-3, "warmup_steps": 3})
    group = t.models.opt.param_groups[0]
    lrs = [group["lr"]]
    for step in (1, 2):
        Trainer._update(t, _update_batch(tok, t.model), step)
        lrs.append(group["lr"])
    assert lrs == pytest.approx([1e-3 / 4, 2e-3 / 4, 3e-3 / 4])  # warm-up: (step + 1) / (warmup + 1)


def test_the_trainer_clips_the_gradient_at_grad_clip(tok):
    """SGD with lr 1: the weights move by exactly the clipped gradient, whose norm is ``grad_clip``."""
    from agentrl.train.trainer import Trainer

    for clip in (1e-3, 2e-3):
        t = _trainer(
            tok, {"lr": 1.0, "grad_clip": clip}, lr_opt=lambda m: torch.optim.SGD(m.parameters(), lr=1.0)
        )
        before = torch.cat([p.detach().flatten().clone() for p in t.model.parameters()])
        m = Trainer._update(t, _update_batch(tok, t.model), 1)
        assert m["actor/grad_norm"] > 10 * clip  # the raw gradient is larger: clipping is what bounds it
        after = torch.cat([p.detach().flatten() for p in t.model.parameters()])
        assert float((after - before).norm()) == pytest.approx(clip, rel=1e-3)


@pytest.mark.parametrize(
    ("schedule", "want"),
    [("constant", [0.5, 1.0, 1.0, 1.0, 1.0]), ("linear", [0.5, 1.0, 2 / 3, 1 / 3, 0.0]),
     ("cosine", [0.5, 1.0, 0.75, 0.25, 0.0])],
)  # fmt: skip
def test_the_schedule_warms_up_then_follows_its_shape(schedule, want):
    f = lr_lambda(OptimConfig(warmup_steps=1, schedule=schedule), steps=4)
    assert [f(s) for s in range(5)] == pytest.approx(want)


def test_the_optimisers_take_lr_betas_and_weight_decay_from_the_config(tok):
    from agentrl.train.build import build_models

    optim = {"lr": 3e-4, "critic_lr": 7e-4, "betas": (0.8, 0.95), "weight_decay": 0.05}
    cfg = TrainConfig.model_validate(
        {
            "optim": optim,
            "algorithm": {"name": "ppo"},
            "model": {"path": "tiny:layers=1,hidden=32,heads=2,kv_heads=1"},
        }
    )
    models = build_models(cfg, len(tok), torch.device("cpu"))
    for opt, lr in ((models.opt, 3e-4), (models.critic_opt, 7e-4)):
        g = opt.param_groups[0]
        assert (g["lr"], tuple(g["betas"]), g["weight_decay"]) == (lr, (0.8, 0.95), 0.05)
    # And they act: one AdamW step with a zero gradient moves a weight only by the decay.
    p = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.AdamW(
        [p], **{k: v for k, v in models.opt.param_groups[0].items() if k in ("lr", "betas", "weight_decay")}
    )
    p.grad = torch.zeros(3)
    opt.step()
    assert p.detach().tolist() == pytest.approx([1 - 3e-4 * 0.05] * 3)


def test_a_reference_copy_exists_only_for_a_kl_term(tok):
    from agentrl.train.build import build_models

    base = {"model": {"path": "tiny:layers=1,hidden=32,heads=2,kv_heads=1"}}
    for algo, wants_ref in (({}, False), ({"kl_loss_coef": 0.1}, True), ({"kl_in_reward": True}, True)):
        models = build_models(
            TrainConfig.model_validate({**base, "algorithm": algo}), len(tok), torch.device("cpu")
        )
        assert (models.ref is not None) == wants_ref
