"""The update step end to end on a tiny random model: PPO and GRPO steps, gradient masking, micro-batch
accumulation, and a KL-only objective that pulls the policy toward the reference."""

import random

import pytest
import torch

from agentrl.algos import kl_penalty, logprobs_from_logits, masked_mean, policy_loss
from agentrl.learn.models import ValueModel, build_tiny_model, frozen_copy
from agentrl.tokens import Expander, collate
from agentrl.train.config import AlgorithmConfig
from agentrl.train.update import (
    compute_advantages,
    forward_logprobs,
    forward_values,
    update_actor,
    update_critic,
)
from agentrl.trajectory import FunctionCall, Message, RewardBreakdown, ToolCall, Trajectory
from tests.tokens.fixtures import make_tokenizer


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer("chatml")


def _sampled(tok, rng, n):
    """n random 'sampled' ids ending with the stop token, as a policy would produce them."""
    stop = tok.convert_tokens_to_ids("<|im_end|>")
    return [rng.randrange(20, 200) for _ in range(n)] + [stop]


def _trajectories(tok, n=6, seed=0):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        call = ToolCall(id="c1", function=FunctionCall(name="search", arguments='{"query": "cloud revenue"}'))
        msgs = [
            Message(role="system", content="You are a research agent."),
            Message(role="user", content=f"Summarise the results of company {i % 3}."),
            Message(
                role="assistant",
                content="",
                tool_calls=[call],
                token_ids=_sampled(tok, rng, rng.randint(3, 8)),
            ),
            Message(role="tool", tool_call_id="c1", content="1. [example.com] results of the quarter"),
            Message(role="assistant", content="report", token_ids=_sampled(tok, rng, rng.randint(2, 10))),
        ]
        out.append(
            Trajectory(
                id=f"t{i}", task_id=f"task-{i % 3}", messages=msgs, reward=RewardBreakdown(total=float(i % 2))
            )
        )
    return out


def _batch(tok, trajs):
    exp = Expander(tok)
    return collate([exp.expand(t) for t in trajs], pad_token_id=tok.pad_token_id or 0)


def _models(tok, seed=0):
    actor = build_tiny_model(len(tok), "tiny:layers=1,hidden=32,heads=2,kv_heads=1", seed=seed)
    return actor, ValueModel.from_policy(actor)


@pytest.mark.parametrize("algo", ["ppo", "grpo"])
def test_one_step_end_to_end(tok, algo):
    torch.manual_seed(0)
    trajs = _trajectories(tok)
    batch = _batch(tok, trajs)
    actor, critic = _models(tok)
    ref = frozen_copy(actor)
    cfg = AlgorithmConfig(name=algo, mini_batch_size=4, micro_batch_tokens=256, kl_loss_coef=0.01)
    with torch.no_grad():
        batch["old_logprobs"], _ = forward_logprobs(actor, batch)
        batch["ref_logprobs"], _ = forward_logprobs(ref, batch)
        batch["values"] = forward_values(critic, batch)
    metrics = compute_advantages(batch, cfg, [t.task_id for t in trajs])
    mask = batch["loss_mask"].bool()
    assert (batch["advantages"][~mask] == 0).all()
    # The reward sits on the last policy token of each row.
    last = (batch["loss_mask"] * torch.arange(batch["loss_mask"].shape[1])).argmax(-1)
    assert batch["token_level_scores"][torch.arange(len(trajs)), last].tolist() == [
        float(i % 2) for i in range(6)
    ]
    before = [p.detach().clone() for p in actor.parameters()]
    opt = torch.optim.AdamW(actor.parameters(), lr=1e-3)
    am = update_actor(actor, opt, batch, cfg)
    assert {"actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/entropy", "actor/grad_norm"} <= set(
        am
    )
    assert all(torch.isfinite(torch.tensor(v)) for v in am.values())
    assert any(not torch.equal(a, b) for a, b in zip(before, actor.parameters(), strict=True))
    # A single on-policy step: the ratio is exactly 1, so nothing is clipped and the KL is 0.
    fresh = frozen_copy(ref).requires_grad_(True)
    one = update_actor(
        fresh,
        torch.optim.SGD(fresh.parameters(), lr=0.0),
        batch,
        cfg.model_copy(update={"mini_batch_size": 6}),
    )
    assert one["actor/ppo_kl"] == pytest.approx(0.0, abs=1e-6)
    assert one["actor/pg_clipfrac"] == 0.0
    if algo == "ppo":
        cm = update_critic(critic, torch.optim.AdamW(critic.parameters(), lr=1e-3), batch, cfg)
        assert {"critic/vf_loss", "critic/vf_clipfrac", "critic/vf_explained_var"} <= set(cm)
    else:
        # GRPO: one advantage per trajectory, shared by all its policy tokens.
        for row in range(len(trajs)):
            assert batch["advantages"][row][mask[row]].unique().numel() == 1
    assert metrics["critic/advantages/mean"] == pytest.approx(masked_mean(batch["advantages"], mask).item())


def test_masked_tokens_receive_no_policy_gradient(tok):
    torch.manual_seed(1)
    batch = _batch(tok, _trajectories(tok, n=3))
    actor, _ = _models(tok)
    logits = actor(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    logits.retain_grad()
    lp = torch.cat(
        [torch.zeros(3, 1), logprobs_from_logits(logits[:, :-1], batch["input_ids"][:, 1:])], dim=1
    )
    adv = torch.randn_like(lp)  # nonzero everywhere: only the mask may stop the gradient
    loss, _ = policy_loss(lp.detach() + 0.05 * torch.randn_like(lp), lp, adv, batch["loss_mask"])
    loss.backward()
    # logits[t − 1] produce log p(token t): their gradient must vanish wherever token t is masked.
    grad_per_pos = logits.grad.abs().sum(-1)  # [B, T]
    predicts_masked = batch["loss_mask"][:, 1:] == 0
    assert (grad_per_pos[:, :-1][predicts_masked] == 0).all()
    assert (grad_per_pos[:, :-1][~predicts_masked] > 0).all()
    assert (grad_per_pos[:, -1] == 0).all()  # the last position predicts nothing


def _reference_gradient(actor, batch, cfg, norm):
    """The mini-batch's gradient computed independently of ``update_actor``: one padded forward of
    every row, the clipped PPO loss per token written out here, aggregated over the whole batch by
    ``cfg.loss_agg``'s definition (no micro-batches, no injected denominator)."""
    actor.zero_grad(set_to_none=True)
    logits = actor(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()
    lp = torch.log_softmax(logits[:, :-1], -1).gather(-1, batch["input_ids"][:, 1:, None])[..., 0]
    lp = torch.cat([torch.zeros(len(lp), 1), lp], dim=1)
    old, adv, m = batch["old_logprobs"], batch["advantages"], batch["loss_mask"].float()
    ratio = torch.exp(lp - old)
    clipped = torch.clamp(ratio, 1 - cfg.clip_low, 1 + cfg.clip_high)
    per_token = torch.maximum(-adv * ratio, -adv * clipped)
    per_token = torch.where(adv < 0, torch.minimum(per_token, -adv * cfg.clip_c), per_token)
    sums, counts = (per_token * m).sum(-1), m.sum(-1)
    loss = {
        "token-mean": sums.sum() / counts.sum(),
        "seq-mean-token-mean": (sums / counts).mean(),
        "seq-mean-token-sum": sums.mean(),
        "seq-mean-token-sum-norm": sums.sum() / norm,
    }[cfg.loss_agg]
    loss.backward()
    return torch.cat([p.grad.flatten() for p in actor.parameters() if p.grad is not None]).clone()


@pytest.mark.parametrize(
    "agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
)
def test_micro_batches_accumulate_to_the_full_batch_gradient(tok, agg):
    """One micro-batch, and one row at a time, each give the gradient of the whole mini-batch's
    loss computed independently (``_reference_gradient``), not merely the same as each other."""
    trajs = _trajectories(tok, n=5, seed=3)
    grads = []
    for budget in (10_000, 40):  # one micro-batch vs one row at a time
        batch = _batch(tok, trajs)
        actor, _ = _models(tok, seed=5)
        with torch.no_grad():
            batch["old_logprobs"], _ = forward_logprobs(actor, batch)
        batch["old_logprobs"] += 0.1 * torch.randn(
            batch["old_logprobs"].shape, generator=torch.Generator().manual_seed(0)
        )
        batch["advantages"] = torch.randn(
            batch["old_logprobs"].shape, generator=torch.Generator().manual_seed(1)
        )
        cfg = AlgorithmConfig(name="grpo", mini_batch_size=5, micro_batch_tokens=budget, loss_agg=agg)
        want = _reference_gradient(actor, batch, cfg, norm=64)
        actor.zero_grad(set_to_none=True)
        opt = torch.optim.SGD(actor.parameters(), lr=0.0)
        captured = {}
        orig_step = opt.step

        def step(*a, _orig=orig_step, _m=actor, _c=captured, **k):
            _c["g"] = torch.cat([p.grad.flatten() for p in _m.parameters() if p.grad is not None]).clone()
            return _orig(*a, **k)

        opt.step = step
        update_actor(
            actor, opt, batch, cfg, norm=64, grad_clip=1e9, generator=torch.Generator().manual_seed(0)
        )
        assert want.abs().max() > 1e-4  # there is a gradient to get right
        assert torch.allclose(captured["g"], want, atol=1e-6, rtol=1e-4), budget
        grads.append(captured["g"])
    assert torch.allclose(grads[0], grads[1], atol=1e-6, rtol=1e-4)


def test_kl_only_objective_moves_the_policy_toward_the_reference(tok):
    torch.manual_seed(2)
    batch = _batch(tok, _trajectories(tok, n=4))
    actor, _ = _models(tok, seed=0)
    ref, _ = _models(tok, seed=1)
    ref = frozen_copy(ref)
    with torch.no_grad():
        batch["ref_logprobs"], _ = forward_logprobs(ref, batch)
        batch["old_logprobs"], _ = forward_logprobs(actor, batch)
    batch["advantages"] = torch.zeros_like(batch["old_logprobs"])
    cfg = AlgorithmConfig(name="grpo", kl_loss_coef=1.0, kl_kind="k3", mini_batch_size=4, clip_c=None)

    def kl():
        with torch.no_grad():
            lp, _ = forward_logprobs(actor, batch)
        return masked_mean(kl_penalty(lp, batch["ref_logprobs"], "k3"), batch["loss_mask"]).item()

    start = kl()
    opt = torch.optim.Adam(actor.parameters(), lr=3e-3)
    for _ in range(15):
        update_actor(actor, opt, batch, cfg)
    assert kl() < 0.5 * start


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
@pytest.mark.parametrize("critic", [False, True])
def test_packed_forward_equals_padded_forward(tok, critic, impl):
    lengths = [20, 5, 7, 12, 3, 8]
    g = torch.Generator().manual_seed(0)
    B, T = len(lengths), max(lengths)
    ids = torch.randint(10, 200, (B, T), generator=g)
    attn = (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).long()
    batch = {
        "input_ids": ids * attn,
        "attention_mask": attn,
        "position_ids": torch.arange(T).expand(B, T) * attn,
    }
    actor, value_model = _models(tok)
    # eager attention adds a 4D mask to the scores: the packed rows' mask must be additive for it
    actor.set_attn_implementation(impl)
    value_model.backbone.set_attn_implementation(impl)
    torch.nn.init.normal_(value_model.head.weight)  # the head starts at 0: every value would be 0
    with torch.no_grad():
        if critic:
            a, b = forward_values(value_model, batch), forward_values(value_model, batch, pack=True)
        else:
            (a, ea), (b, eb) = (forward_logprobs(actor, batch, 0.7, True, pack=p) for p in (False, True))
            assert torch.allclose(ea * attn, eb, atol=1e-5)
    assert torch.allclose(a * attn, b, atol=1e-5)
    # The six rows fit in fewer lines than rows: packing actually packed something.
    from agentrl.learn.forward import _Packing

    assert _Packing(batch, actor).inputs["input_ids"].shape[0] < B


@pytest.mark.parametrize("pack", [False, True])
def test_chunked_forward_equals_one_forward(tok, pack):
    from agentrl.learn.forward import chunked_forward

    batch = _batch(tok, _trajectories(tok, n=5, seed=7))
    actor, _ = _models(tok)
    with torch.no_grad():
        whole, _ = forward_logprobs(actor, batch)
    parts = chunked_forward(lambda b: forward_logprobs(actor, b, pack=pack)[0], batch, 120, pack)
    assert torch.allclose(whole * batch["attention_mask"], parts, atol=1e-5)
