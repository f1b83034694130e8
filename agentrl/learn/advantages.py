"""The advantages of one update: the reward per token (the judge's score, less β·KL when asked),
then the algorithm's estimator. The trainer and ``agentrl replay`` call this same function."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import torch

from agentrl.algos import (
    LOCAL,
    AdaptiveKLController,
    FixedKLController,
    Reduce,
    apply_kl_penalty,
    gae,
    grpo_advantages,
    masked_mean,
    masked_sum,
    masked_whiten,
    overlong_penalty,
    reinforce_pp_advantages,
    rloo_advantages,
)
from agentrl.learn.algorithm import AlgorithmConfig

__all__ = ["compute_advantages"]

Batch = dict[str, torch.Tensor]


def _trajectory_scores(batch: Batch, rewards: torch.Tensor) -> torch.Tensor:
    return masked_sum(rewards, batch["loss_mask"], dim=-1)


def _per_episode(
    batch: Batch,
    scores: torch.Tensor,
    group_ids: Sequence[Hashable] | torch.Tensor,
    mask: torch.Tensor,
    estimator: Callable[[torch.Tensor, Sequence[Hashable] | torch.Tensor, torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """A group estimator (GRPO, RLOO) over episodes, not rows: an episode whose context was rewritten
    has a row per segment (``batch["episode"]``), each ending in the episode's outcome
    (``batch["outcome"]``); the group sees the episode once, scored by the sum of its rows' rewards
    with the outcome counted once (so a KL penalty, overlong shaping or turn rewards of every
    segment count), and every row of the episode gets its advantage."""
    if "episode" not in batch:
        return estimator(scores, group_ids, mask)
    episode = batch["episode"].tolist()
    order = list(dict.fromkeys(episode))  # episodes in the order of their first row
    where = {e: k for k, e in enumerate(order)}
    idx = torch.tensor([where[e] for e in episode], device=scores.device)
    total = torch.zeros(len(order), dtype=scores.dtype, device=scores.device).index_add_(0, idx, scores)
    rows = torch.zeros(len(order), dtype=scores.dtype, device=scores.device).index_add_(
        0, idx, torch.ones_like(scores)
    )
    outcome = torch.zeros(len(order), dtype=scores.dtype, device=scores.device)
    outcome[idx] = batch["outcome"].to(scores.dtype)
    per_score = total - (rows - 1) * outcome
    first = [episode.index(e) for e in order]
    groups = group_ids.tolist() if isinstance(group_ids, torch.Tensor) else list(group_ids)
    one = torch.ones(len(order), 1, dtype=mask.dtype, device=mask.device)
    per_episode = estimator(per_score, [groups[i] for i in first], one)[:, 0]
    return per_episode[idx][:, None] * mask.to(per_episode.dtype)


def compute_advantages(
    batch: Batch,
    cfg: AlgorithmConfig,
    group_ids: Sequence[Hashable] | torch.Tensor,
    kl_controller: FixedKLController | AdaptiveKLController | None = None,
    *,
    reduce: Reduce = LOCAL,
) -> dict[str, float]:
    """Fill ``token_level_rewards``, ``advantages`` and ``returns`` into ``batch``; returns metrics.

    KL in the reward (``cfg.kl_in_reward``) needs ``old_logprobs`` and ``ref_logprobs``; PPO needs
    ``values``. GRPO / RLOO use each trajectory's summed reward, compared within ``group_ids``.
    ``cfg.overlong`` adds DAPO's soft overlong penalty to each trajectory's reward (on its last policy
    token) in ``token_level_rewards``; ``token_level_scores`` stay the judge's.
    Batch statistics (whitening, group baselines, the batch KL, the metrics) are taken over every
    rank's rows through ``reduce`` (default: ``LOCAL``, this process only; the trainer passes its ranks' all-reduce).
    """
    mask = batch["loss_mask"]
    scores = batch["token_level_scores"].float()
    metrics: dict[str, float] = {}
    if cfg.kl_in_reward:
        if kl_controller is None:
            raise ValueError("kl_in_reward needs a KL controller")
        rewards, kl_metrics = apply_kl_penalty(
            scores, batch["old_logprobs"], batch["ref_logprobs"], mask, kl_controller, cfg.kl_kind,
            reduce=reduce,
        )  # fmt: skip
        metrics.update(kl_metrics)
    else:
        rewards = scores
    if cfg.overlong.enable:
        rewards, shaping = _add_overlong_penalty(rewards, mask, cfg)
        metrics.update(shaping)
    batch["token_level_rewards"] = rewards
    if cfg.name == "ppo":
        adv, ret = gae(rewards, batch["values"], mask, cfg.gamma, cfg.lam)
        batch["returns"] = ret
        if cfg.whiten_advantages:
            batch["raw_advantages"] = adv
            adv = masked_whiten(adv, mask, reduce=reduce) * mask
    elif cfg.name == "grpo":
        adv = _per_episode(
            batch, _trajectory_scores(batch, rewards), group_ids, mask,
            lambda sc, g, m: grpo_advantages(sc, g, m, norm_by_std=cfg.norm_adv_by_std, reduce=reduce),
        )  # fmt: skip
    elif cfg.name == "rloo":
        adv = _per_episode(
            batch, _trajectory_scores(batch, rewards), group_ids, mask,
            lambda sc, g, m: rloo_advantages(sc, g, m, reduce=reduce),
        )  # fmt: skip
    else:
        adv = reinforce_pp_advantages(rewards, mask, cfg.gamma, reduce=reduce)
    batch["advantages"] = adv
    if "returns" not in batch:
        batch["returns"] = adv.clone()
    metrics.update(_advantage_metrics(adv, mask, _trajectory_scores(batch, rewards), reduce))
    return metrics


def _add_overlong_penalty(
    rewards: torch.Tensor, mask: torch.Tensor, cfg: AlgorithmConfig
) -> tuple[torch.Tensor, dict[str, float]]:
    """DAPO's soft overlong penalty on each row's last policy token (where the reward sits). A
    multi-turn episode's response length is its number of policy tokens (every turn's sampled
    tokens; prompts and tool observations are not the policy's)."""
    o = cfg.overlong
    if o.max_tokens is None:
        raise ValueError("algorithm.overlong.max_tokens is not set (the trainer fills it in from rollout)")
    lengths = mask.sum(-1)
    penalty = overlong_penalty(lengths, o.max_tokens, o.len, o.penalty_factor).to(rewards.dtype)
    T = mask.shape[-1]
    last = (T - 1 - mask.flip(-1).to(torch.int64).argmax(-1)).clamp_min(0)
    out = rewards.clone()
    rows = torch.arange(len(rewards), device=rewards.device)
    out[rows, last] += torch.where(lengths > 0, penalty, torch.zeros_like(penalty))
    on = (lengths > 0).to(penalty.dtype)
    n = on.sum().clamp_min(1)
    return out, {
        "overlong/penalty_mean": float((penalty * on).sum() / n),
        "overlong/penalized_frac": float(((penalty < 0).to(penalty.dtype) * on).sum() / n),
    }


def _advantage_metrics(
    adv: torch.Tensor, mask: torch.Tensor, scores: torch.Tensor, reduce: Reduce
) -> dict[str, float]:
    """The advantages' mean, max and min over policy tokens and the mean trajectory reward, over
    every rank's rows."""
    on = mask.bool()
    inf = torch.tensor(torch.inf, dtype=torch.float64, device=adv.device)
    local_max = adv[on].double().max() if on.any() else -inf
    local_min = adv[on].double().min() if on.any() else inf
    hi, neg_lo = reduce.max(torch.stack([local_max, -local_min])).tolist()
    total, count = reduce.sum(
        torch.tensor([float(scores.double().sum()), float(scores.numel())], dtype=torch.float64)
    ).tolist()
    any_tokens = hi > -torch.inf
    return {
        "critic/advantages/mean": masked_mean(adv, mask, reduce=reduce).item(),
        "critic/advantages/max": hi if any_tokens else 0.0,
        "critic/advantages/min": -neg_lo if any_tokens else 0.0,
        "critic/rewards/mean": total / max(count, 1.0),
    }
