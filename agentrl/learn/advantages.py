"""The advantages of one update: the reward per token (the judge's score, less β·KL when asked),
then the algorithm's estimator. The trainer and ``agentrl replay`` call this same function."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import torch

from agentrl.algos import (
    AdaptiveKLController,
    FixedKLController,
    apply_kl_penalty,
    gae,
    grpo_advantages,
    masked_mean,
    masked_sum,
    masked_whiten,
    reinforce_pp_advantages,
    rloo_advantages,
)
from agentrl.learn.algorithm import AlgorithmConfig

__all__ = ["compute_advantages"]

Batch = dict[str, torch.Tensor]
Reduce = Callable[[float], float]


def _trajectory_scores(batch: Batch, rewards: torch.Tensor) -> torch.Tensor:
    return masked_sum(rewards, batch["loss_mask"], dim=-1)


def compute_advantages(
    batch: Batch,
    cfg: AlgorithmConfig,
    group_ids: Sequence[Hashable] | torch.Tensor,
    kl_controller: FixedKLController | AdaptiveKLController | None = None,
    *,
    reduce_sum: Reduce | None = None,
) -> dict[str, float]:
    """Fill ``token_level_rewards``, ``advantages`` and ``returns`` ([B, T]) into ``batch``; returns
    metrics.

    KL in the reward (``cfg.kl_in_reward``) needs ``old_logprobs`` and ``ref_logprobs``; PPO needs
    ``values``. GRPO / RLOO use each trajectory's summed reward, compared within ``group_ids``.
    ``reduce_sum`` (a float summed over processes, e.g. an all-reduce) makes PPO's whitening use
    every process's tokens, so N ranks compute what one process computes; None: this process only.
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
            adv = _whiten(adv, mask, reduce_sum)
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


def _whiten(adv: torch.Tensor, mask: torch.Tensor, reduce_sum: Reduce | None) -> torch.Tensor:
    """``masked_whiten``; with ``reduce_sum``, the mean and unbiased variance are taken over the
    policy tokens of every process that ``reduce_sum`` sums over."""
    if reduce_sum is None:
        return masked_whiten(adv, mask) * mask
    m = mask.to(torch.float64)
    a = adv.to(torch.float64)
    n = reduce_sum(float(m.sum()))
    mean = reduce_sum(float((a * m).sum())) / max(n, 1e-8)
    var = reduce_sum(float((((a - mean) * m) ** 2).sum())) / max(n, 1e-8)
    if n > 1:
        var *= n / (n - 1)
    return ((adv - mean) * torch.rsqrt(torch.tensor(var + 1e-8, dtype=adv.dtype))) * mask
