"""One RL update over a batch of expanded trajectories, in the order the trainer runs it:
advantages → actor and critic steps (the forward passes are in ``agentrl.learn.forward``, and are
re-exported here).

A batch is the dict of ``agentrl.tokens.collate`` ([B, T] tensors: ``input_ids``, ``attention_mask``,
``position_ids``, ``loss_mask``, ``old_logprobs``, ``token_level_scores``) to which these functions
add ``values``, ``ref_logprobs``, ``token_level_rewards``, ``advantages`` and ``returns``.
All losses are normalised by the whole mini-batch (``agg_loss``'s ``denominator``), so gradient
accumulation over micro-batches gives the gradient of the mini-batch loss exactly. Under ``torchrun``
each rank holds a shard of the batch's rows (rank 0's first, in the one-process order): the
advantages' batch statistics and the mini-batches' membership go through ``rank_reduce()``, so N ranks
take the step one process takes on the whole batch.
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
    Reduce,
    agg_loss,
    explained_variance,
    kl_penalty,
    mini_batch_rows,
    value_loss,
)
from agentrl.learn import advantages
from agentrl.learn.algorithm import AlgorithmConfig
from agentrl.learn.forward import chunked_forward, forward_logprobs, forward_values, micro_batches
from agentrl.learn.policy_terms import actor_batch, select_policy_loss
from agentrl.train.distributed import (
    all_gather_objects,
    all_reduce_grads,
    all_reduce_max,
    all_reduce_sum,
    rank_reduce,
    world_size,
)
from agentrl.train.fsdp import dummy_micro_batch, is_sharded

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


def compute_advantages(
    batch: Batch,
    cfg: AlgorithmConfig,
    group_ids: Sequence[Hashable] | torch.Tensor,
    kl_controller: FixedKLController | AdaptiveKLController | None = None,
    reduce: Reduce | None = None,
) -> dict[str, float]:
    """``agentrl.learn.advantages.compute_advantages`` (which replay calls too), with batch statistics
    taken over every rank's rows through ``reduce`` (default: ``rank_reduce()``, i.e. one process
    outside torchrun)."""
    return advantages.compute_advantages(
        batch, cfg, group_ids, kl_controller, reduce=rank_reduce() if reduce is None else reduce
    )


def _denominator(mb: Batch, agg: str, norm: int) -> float:
    """The mini-batch's loss divisor, counted over every rank (see ``agg_loss``)."""
    mask = mb["loss_mask"]
    if agg == "seq-mean-token-sum-norm":
        return float(norm)
    local = float(mask.sum()) if agg == "token-mean" else float((mask.sum(-1) > 0).sum())
    return max(all_reduce_sum(local), 1.0)


def _mini_batches(
    batch: Batch, mini_batch_size: int, generator: torch.Generator | None, reduce: Reduce
) -> Iterator[Batch]:
    """This rank's rows of each mini-batch of one epoch: the mini-batches of one process over every
    rank's rows (``mini_batch_rows``); every rank yields the same number (some maybe empty), so that
    the collective calls of the update line up."""
    for rows in mini_batch_rows(batch["input_ids"].shape[0], mini_batch_size, generator, reduce=reduce):
        yield {key: v[rows.to(v.device)] for key, v in batch.items()}


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
    reduce = rank_reduce()
    sums: dict[str, float] = {}
    steps = 0
    for _ in range(cfg.ppo_epochs):
        for mini in _mini_batches(batch, cfg.mini_batch_size, generator, reduce):
            denom = _denominator(mini, cfg.loss_agg, norm)
            # Over every rank, so that each rank's share of a metric can be summed (below).
            tokens = max(all_reduce_sum(float(mini["loss_mask"].sum())), 1.0)
            step_metrics: dict[str, float] = {}
            rows = torch.arange(len(mini["input_ids"]))
            mbs = list(micro_batches(mini, rows, cfg.micro_batch_tokens, packed=cfg.pack_sequences))
            # FSDP: every rank runs as many forward/backward passes as the busiest one. The count is
            # agreed before the first pass: asked after them, it would meet the busier rank's
            # all-gathers instead of its all-reduce (a hang under gloo).
            dummies = all_reduce_max(len(mbs)) - len(mbs) if sharded else 0
            for mb in mbs:
                loss, summed, averaged = loss_fn(mb, denom)
                loss.backward()
                _accumulate(step_metrics, summed, 1.0)
                _accumulate(step_metrics, averaged, float(mb["loss_mask"].sum()) / tokens)
            for _ in range(dummies):
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

    The policy loss is ``cfg.policy_loss``'s (vanilla PPO or GSPO); the rollout correction's IS
    weights and rejection mask and the masked truncated episodes apply to it
    (``agentrl.learn.policy_terms.actor_batch``, whose metrics are returned too).
    """
    batch, corr_metrics = actor_batch(batch, cfg, rank_reduce())
    pg_loss = select_policy_loss(cfg)

    def loss_fn(mb: Batch, denom: float):
        mask = mb["loss_mask"]
        lp, ent = forward_logprobs(
            model, mb, temperature, with_entropy=True, pack=cfg.pack_sequences, policy_only=True
        )
        loss, ratios = pg_loss(
            mb["old_logprobs"], lp, mb["advantages"], mask, agg=cfg.loss_agg, denominator=denom,
            is_weights=mb.get("rollout_is_weights"),
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

    return corr_metrics | _optimise(
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
        batch["values"], batch["returns"], batch["loss_mask"], reduce=rank_reduce()
    ).item()
    return out
