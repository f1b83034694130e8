"""One RL update over a batch of expanded trajectories, in the order the trainer runs it:
forward passes (log-probs, values) → advantages → actor and critic steps.

A batch is the dict of ``agentrl.tokens.collate`` ([B, T] tensors: ``input_ids``, ``attention_mask``,
``position_ids``, ``loss_mask``, ``old_logprobs``, ``token_level_scores``) to which these functions
add ``values``, ``ref_logprobs``, ``token_level_rewards``, ``advantages`` and ``returns``.
All losses are normalised by the whole mini-batch (``agg_loss``'s ``denominator``), so gradient
accumulation over micro-batches gives the gradient of the mini-batch loss exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from agentrl.algos import (
    AdaptiveKLController,
    FixedKLController,
    agg_loss,
    apply_kl_penalty,
    entropy_from_logits,
    explained_variance,
    gae,
    grpo_advantages,
    kl_penalty,
    masked_mean,
    masked_sum,
    masked_whiten,
    policy_loss,
    reinforce_pp_advantages,
    rloo_advantages,
    value_loss,
)
from agentrl.tokens import token_logprobs
from agentrl.train.config import AlgorithmConfig
from agentrl.train.distributed import (
    all_gather_objects,
    all_reduce_grads,
    all_reduce_max,
    all_reduce_sum,
    world_size,
)
from agentrl.train.fsdp import dummy_micro_batch, is_sharded
from agentrl.train.models import autocast

__all__ = [
    "chunked_forward",
    "compute_advantages",
    "forward_logprobs",
    "forward_values",
    "micro_batches",
    "update_actor",
    "update_critic",
]

Batch = dict[str, torch.Tensor]


def _inputs(batch: Batch) -> dict[str, torch.Tensor]:
    return {k: batch[k] for k in ("input_ids", "attention_mask", "position_ids")}


class _Packing:
    """Right-padded rows [n, w] packed into R ≤ n lines [R, C] (first-fit by decreasing length, C the
    longest row), with position ids restarting per row and a block-causal attention mask, so that
    each row attends only to itself. ``unpack`` maps per-token outputs back to the padded layout."""

    def __init__(self, batch: Batch, model: nn.Module) -> None:
        from agentrl.tokens import block_causal_mask

        lengths = batch["attention_mask"].sum(-1).tolist()
        self.shape = tuple(batch["input_ids"].shape)
        C = max(max(lengths), 1)
        lines: list[int] = []  # free space per line
        self.line, self.offset = [0] * len(lengths), [0] * len(lengths)
        for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
            j = next((k for k, free in enumerate(lines) if free >= lengths[i]), None)
            if j is None:
                lines.append(C)
                j = len(lines) - 1
            self.line[i], self.offset[i] = j, C - lines[j]
            lines[j] -= lengths[i]
        dev = batch["input_ids"].device
        ids = torch.zeros(len(lines), C, dtype=torch.long, device=dev)
        pos = torch.zeros_like(ids)
        seq = torch.full_like(ids, -1)
        for i, n in enumerate(lengths):
            a, b = self.offset[i], self.offset[i] + n
            ids[self.line[i], a:b] = batch["input_ids"][i, :n]
            pos[self.line[i], a:b] = torch.arange(n, device=dev)
            seq[self.line[i], a:b] = i
        self.lengths = torch.tensor(lengths, device=dev)
        # FlashAttention-2 finds the packed rows from the position ids; other kernels need the mask.
        flash = getattr(getattr(model, "config", None), "_attn_implementation", "") == "flash_attention_2"
        self.inputs = {
            "input_ids": ids,
            "position_ids": pos,
            "attention_mask": None if flash else block_causal_mask(seq),
        }

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """[R, C] per-token outputs → [n, w]; 0 beyond each row's length and at its token 0 (a shifted
        output there would come from the previous row of the line)."""
        _, w = self.shape
        dev = x.device
        t = torch.arange(w, device=dev)
        cols = (torch.tensor(self.offset, device=dev)[:, None] + t).clamp(max=x.shape[1] - 1)
        out = x[torch.tensor(self.line, device=dev)[:, None], cols]
        keep = (t[None, :] < self.lengths[:, None]) & (t[None, :] > 0)
        return torch.where(keep, out, torch.zeros((), dtype=x.dtype, device=dev))


def forward_logprobs(
    model: nn.Module, batch: Batch, temperature: float = 1.0, with_entropy: bool = False, pack: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(token t | tokens < t) at temperature ``temperature``, and optionally the entropy of that
    distribution: ([B, T], [B, T] or None), 0 at t = 0 (the logits at t − 1 predict token t).
    ``pack`` runs the forward pass on the rows packed into fewer lines (same results, less padding)."""
    p = _Packing(batch, model) if pack else None
    inputs = p.inputs if p else _inputs(batch)
    with autocast(model):
        logits = model(**inputs).logits
    if temperature != 1.0:
        logits = logits / temperature
    lp = token_logprobs(logits, inputs["input_ids"])
    ent = None
    if with_entropy:
        e = entropy_from_logits(logits[:, :-1].float())
        ent = torch.cat([torch.zeros_like(e[:, :1]), e], dim=1)
    if p is not None:
        lp, ent = p.unpack(lp), (None if ent is None else p.unpack(ent))
    return lp, ent


def forward_values(critic: nn.Module, batch: Batch, pack: bool = False) -> torch.Tensor:
    """The critic's V(s_t) for every token: [B, T] (float32); ``pack`` as in ``forward_logprobs``."""
    p = _Packing(batch, critic) if pack else None
    with autocast(critic):
        values = critic(**(p.inputs if p else _inputs(batch))).float()
    return p.unpack(values) if p is not None else values


def _trajectory_scores(batch: Batch, rewards: torch.Tensor) -> torch.Tensor:
    return masked_sum(rewards, batch["loss_mask"], dim=-1)


def compute_advantages(
    batch: Batch,
    cfg: AlgorithmConfig,
    group_ids: Sequence[Hashable] | torch.Tensor,
    kl_controller: FixedKLController | AdaptiveKLController | None = None,
) -> dict[str, float]:
    """Fill ``token_level_rewards``, ``advantages`` and ``returns`` into ``batch``; returns metrics.

    KL in the reward (``cfg.kl_in_reward``) needs ``old_logprobs`` and ``ref_logprobs``; PPO needs
    ``values``. GRPO / RLOO use each trajectory's summed reward, compared within ``group_ids``.
    """
    mask = batch["loss_mask"]
    scores = batch["token_level_scores"].float()
    metrics: dict[str, float] = {}
    if cfg.kl_in_reward:
        if kl_controller is None:
            raise ValueError("kl_in_reward needs a KL controller")
        rewards, kl_metrics = apply_kl_penalty(
            scores, batch["old_logprobs"], batch["ref_logprobs"], mask, kl_controller, cfg.kl_kind
        )
        metrics.update(kl_metrics)
    else:
        rewards = scores
    batch["token_level_rewards"] = rewards
    if cfg.name == "ppo":
        adv, ret = gae(rewards, batch["values"], mask, cfg.gamma, cfg.lam)
        batch["returns"] = ret
        if cfg.whiten_advantages:
            batch["raw_advantages"] = adv
            adv = _whiten(adv, mask)
    elif cfg.name == "grpo":
        adv = grpo_advantages(
            _trajectory_scores(batch, rewards), group_ids, mask, norm_by_std=cfg.norm_adv_by_std
        )
    elif cfg.name == "rloo":
        adv = rloo_advantages(_trajectory_scores(batch, rewards), group_ids, mask)
    else:
        adv = reinforce_pp_advantages(rewards, mask, cfg.gamma)
    batch["advantages"] = adv
    if "returns" not in batch:
        batch["returns"] = adv.clone()
    metrics["critic/advantages/mean"] = masked_mean(adv, mask).item()
    metrics["critic/advantages/max"] = adv[mask.bool()].max().item() if mask.any() else 0.0
    metrics["critic/advantages/min"] = adv[mask.bool()].min().item() if mask.any() else 0.0
    metrics["critic/rewards/mean"] = _trajectory_scores(batch, rewards).mean().item()
    return metrics


def _whiten(adv: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``masked_whiten`` with the mean and unbiased variance taken over every rank's policy tokens."""
    if world_size() == 1:
        return masked_whiten(adv, mask) * mask
    m = mask.to(torch.float64)
    a = adv.to(torch.float64)
    n = all_reduce_sum(float(m.sum()))
    mean = all_reduce_sum(float((a * m).sum())) / max(n, 1e-8)
    var = all_reduce_sum(float((((a - mean) * m) ** 2).sum())) / max(n, 1e-8)
    if n > 1:
        var *= n / (n - 1)
    return ((adv - mean) * torch.rsqrt(torch.tensor(var + 1e-8, dtype=adv.dtype))) * mask


def micro_batches(
    batch: Batch, rows: torch.Tensor, token_budget: int, packed: bool = False
) -> Iterator[Batch]:
    """Split ``rows`` (indices into the batch) into micro-batches of at most ``token_budget`` tokens —
    padded tokens, or real tokens when the forward pass packs the rows — each trimmed to its longest
    row. Rows are taken in length order to waste little padding."""
    lengths = batch["attention_mask"][rows].sum(-1)
    order = rows[torch.argsort(lengths, descending=True)]
    sorted_len = lengths[torch.argsort(lengths, descending=True)].tolist()
    start = 0
    while start < len(order):
        if packed:
            total, n = 0, 0
            while start + n < len(order) and (n == 0 or total + sorted_len[start + n] <= token_budget):
                total += sorted_len[start + n]
                n += 1
        else:
            n = max(1, token_budget // max(int(sorted_len[start]), 1))
        idx = order[start : start + n]
        width = int(batch["attention_mask"][idx].sum(-1).max())
        mb = {k: (v[idx, :width] if v.dim() == 2 else v[idx]) for k, v in batch.items()}
        mb["_rows"] = idx
        yield mb
        start += n


@torch.no_grad()
def chunked_forward(
    fn: Callable[[Batch], torch.Tensor], batch: Batch, token_budget: int, packed: bool = False
) -> torch.Tensor:
    """``fn`` (a per-token forward such as ``forward_logprobs``) over the whole batch, one micro-batch
    at a time so that a large batch never needs one huge forward pass: [B, T] (float32)."""
    B, T = batch["input_ids"].shape
    out = torch.zeros(B, T, dtype=torch.float32, device=batch["input_ids"].device)
    for mb in micro_batches(batch, torch.arange(B), token_budget, packed):
        y = fn(mb)
        out[mb["_rows"], : y.shape[1]] = y.float()
    return out


def _denominator(mb: Batch, agg: str, norm: int) -> float:
    """The mini-batch's loss divisor, counted over every rank (see ``agg_loss``)."""
    mask = mb["loss_mask"]
    if agg == "seq-mean-token-sum-norm":
        return float(norm)
    local = float(mask.sum()) if agg == "token-mean" else float((mask.sum(-1) > 0).sum())
    return max(all_reduce_sum(local), 1.0)


def _mini_batches(batch: Batch, mini_batch_size: int, generator: torch.Generator | None) -> Iterator[Batch]:
    """This rank's mini-batches of one epoch; every rank yields the same number (some maybe empty),
    so that the collective calls of the update line up."""
    B = batch["input_ids"].shape[0]
    size = max(1, mini_batch_size // world_size())
    steps = all_reduce_max(-(-B // size))
    perm = torch.randperm(B, generator=generator)
    for k in range(steps):
        rows = perm[k * size : (k + 1) * size]
        yield {key: v[rows] for key, v in batch.items()}


def _step(params: list[nn.Parameter], optimizer: torch.optim.Optimizer, grad_clip: float) -> float:
    if not any(isinstance(p, DTensor) for p in params):  # FSDP2 has already reduced its gradients
        all_reduce_grads(params)
    grad_norm = torch.nn.utils.clip_grad_norm_(params, grad_clip)
    if isinstance(grad_norm, DTensor):
        grad_norm = grad_norm.full_tensor()
    # No step on a zero gradient (every advantage 0: no signal) or a non-finite one: Adam would
    # otherwise keep moving the weights along its momentum with nothing to learn from.
    if torch.isfinite(grad_norm) and grad_norm > 0:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(grad_norm)


def _sum_over_ranks(metrics: dict[str, float]) -> dict[str, float]:
    """Each rank holds its share of a mini-batch's metrics (losses divided by counts over every
    rank; ratios weighted by its share of every rank's tokens): their sum is the mini-batch's value."""
    if world_size() == 1:
        return metrics
    out: dict[str, float] = {}
    for part in all_gather_objects(metrics):
        _accumulate(out, part, 1.0)
    return out


def _accumulate(sums: dict[str, float], values: dict[str, Any], weight: float) -> None:
    for k, v in values.items():
        sums[k] = sums.get(k, 0.0) + weight * float(v)


# loss_fn(micro_batch, denominator) → (loss to backpropagate, metrics that are parts of the
# mini-batch loss and add up over micro-batches, metrics that are token means over the micro-batch)
LossFn = Callable[[Batch, float], tuple[torch.Tensor, dict[str, Any], dict[str, Any]]]


def _optimise(
    module: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    cfg: AlgorithmConfig,
    loss_fn: LossFn,
    *,
    grad_norm_key: str,
    norm: int,
    grad_clip: float,
    generator: torch.Generator | None,
) -> dict[str, float]:
    """Epochs × mini-batches × micro-batches of ``loss_fn``, one clipped optimiser step per
    mini-batch; returns the metrics averaged over optimiser steps."""
    module.train()
    params = [p for p in module.parameters() if p.requires_grad]
    sharded = is_sharded(module)
    sums: dict[str, float] = {}
    steps = 0
    for _ in range(cfg.ppo_epochs):
        for mini in _mini_batches(batch, cfg.mini_batch_size, generator):
            denom = _denominator(mini, cfg.loss_agg, norm)
            # Over every rank, so that each rank's share of a metric can be summed (below).
            tokens = max(all_reduce_sum(float(mini["loss_mask"].sum())), 1.0)
            step_metrics: dict[str, float] = {}
            rows = torch.arange(len(mini["input_ids"]))
            mbs = list(micro_batches(mini, rows, cfg.micro_batch_tokens, packed=cfg.pack_sequences))
            for mb in mbs:
                loss, summed, averaged = loss_fn(mb, denom)
                loss.backward()
                _accumulate(step_metrics, summed, 1.0)
                _accumulate(step_metrics, averaged, float(mb["loss_mask"].sum()) / tokens)
            if sharded:  # FSDP: every rank runs as many forward/backward passes as the busiest one
                for _ in range(all_reduce_max(len(mbs)) - len(mbs)):
                    loss_fn(dummy_micro_batch(batch), 1.0)[0].backward()
            step_metrics = _sum_over_ranks(step_metrics)
            step_metrics[grad_norm_key] = _step(params, optimizer, grad_clip)
            _accumulate(sums, step_metrics, 1.0)
            steps += 1
    return {k: v / max(steps, 1) for k, v in sums.items()}


def update_actor(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    cfg: AlgorithmConfig,
    *,
    temperature: float = 1.0,
    norm: int = 1024,
    grad_clip: float = 1.0,
    generator: torch.Generator | None = None,
) -> dict[str, float]:
    """PPO-clip epochs over mini-batches of trajectories; returns ``actor/*`` metrics averaged over steps.

    Loss per mini-batch: policy_loss + kl_loss_coef·KL(π‖π_ref) − entropy_coef·H, each aggregated by
    ``cfg.loss_agg`` over the mini-batch's policy tokens. ``norm`` is the constant normaliser of
    ``seq-mean-token-sum-norm`` (the trainer passes its max length). Gradients are clipped to
    ``grad_clip``; a step with a zero or non-finite gradient norm is skipped.
    """

    def loss_fn(mb: Batch, denom: float):
        mask = mb["loss_mask"]
        lp, ent = forward_logprobs(model, mb, temperature, with_entropy=True, pack=cfg.pack_sequences)
        loss, ratios = policy_loss(
            mb["old_logprobs"], lp, mb["advantages"], mask,
            clip_low=cfg.clip_low, clip_high=cfg.clip_high, clip_c=cfg.clip_c, agg=cfg.loss_agg,
            denominator=denom,
        )  # fmt: skip
        summed = {"actor/pg_loss": loss.detach()}
        if cfg.kl_loss_coef > 0:
            kl = agg_loss(
                kl_penalty(lp, mb["ref_logprobs"], cfg.kl_kind), mask, cfg.loss_agg, denominator=denom
            )
            loss = loss + cfg.kl_loss_coef * kl
            summed["actor/kl_loss"] = kl.detach()
        entropy = agg_loss(ent, mask, cfg.loss_agg, denominator=denom)
        if cfg.entropy_coef:
            loss = loss - cfg.entropy_coef * entropy
        summed["actor/entropy"] = entropy.detach()
        return loss, summed, {f"actor/{k}": v for k, v in ratios.items()}

    return _optimise(
        model, optimizer, batch, cfg, loss_fn,
        grad_norm_key="actor/grad_norm", norm=norm, grad_clip=grad_clip, generator=generator,
    )  # fmt: skip


def update_critic(
    critic: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    cfg: AlgorithmConfig,
    *,
    norm: int = 1024,
    grad_clip: float = 1.0,
    generator: torch.Generator | None = None,
) -> dict[str, float]:
    """Clipped value-loss epochs toward ``returns``; returns ``critic/*`` metrics."""

    def loss_fn(mb: Batch, denom: float):
        vpreds = forward_values(critic, mb, pack=cfg.pack_sequences)
        loss, clipfrac = value_loss(
            vpreds, mb["returns"], mb["values"], mb["loss_mask"],
            clip=cfg.value_clip, agg=cfg.loss_agg, denominator=denom,
        )  # fmt: skip
        return cfg.vf_coef * loss, {"critic/vf_loss": loss.detach()}, {"critic/vf_clipfrac": clipfrac}

    out = _optimise(
        critic, optimizer, batch, cfg, loss_fn,
        grad_norm_key="critic/grad_norm", norm=norm, grad_clip=grad_clip, generator=generator,
    )  # fmt: skip
    out["critic/vf_explained_var"] = explained_variance(
        batch["values"], batch["returns"], batch["loss_mask"]
    ).item()
    return out
