"""The metrics of one RL step: episode statistics over what was sampled, the batch's sizes, and
their reduction over ranks (means, with counts such as drops summed)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from agentrl.algos import masked_mean
from agentrl.env.sources import opened_sources
from agentrl.learn.batch import normalized_reward
from agentrl.train.distributed import all_gather_objects
from agentrl.trajectory import Trajectory

__all__ = ["batch_metrics", "mean_over_ranks", "rollout_metrics"]


def mean_over_ranks(metrics: dict[str, float]) -> dict[str, float]:
    """Average each metric over the ranks that reported it (counts such as drops are summed)."""
    parts = all_gather_objects(metrics)
    if len(parts) == 1:
        return metrics
    out: dict[str, float] = {}
    for key in sorted({k for p in parts for k in p}):
        vals = [p[key] for p in parts if key in p]
        summed = key.startswith(("train/dropped", "train/tokens", "train/prompts", "judge/"))
        out[key] = float(sum(vals)) if summed else float(sum(vals) / len(vals))
    out["step"] = int(metrics["step"])
    return out


def rollout_metrics(trajs: list[Trajectory], kinds: dict[str, Any], step: int) -> dict[str, float]:
    """The step's scores and episode statistics (over every trajectory, dropped ones included)."""
    scored = [t for t in trajs if t.reward is not None and t.reward.total is not None]
    m = {
        # the update is applied to version step − 1; 0 on-policy, 1 one step off
        "rollout/staleness": float(
            np.mean([step - 1 - t.info.get("policy_version", step - 1) for t in trajs])
        ),
        "critic/score/mean": float(np.mean([t.reward.total for t in scored])) if scored else 0.0,
        "critic/score/normalized_mean": float(np.mean([normalized_reward(t) for t in scored]))
        if scored
        else 0.0,
        "env/num_turns/mean": float(np.mean([t.info.get("turns", 0) for t in trajs])),
        "env/tool_calls/mean": float(np.mean([t.info.get("tool_calls", 0) for t in trajs])),
        # episodes with at least one tool call the env ran (the rollout summary's tool_call_episodes)
        "env/tool_call_episodes": float(np.mean([t.info.get("tool_calls", 0) > 0 for t in trajs])),
        "env/answered/frac": float(np.mean([bool(t.info.get("terminated")) for t in trajs])),
        "env/format_errors/mean": float(np.mean([t.info.get("format_errors", 0) for t in trajs])),
    }
    return m | opened_sources(trajs, kinds)


def batch_metrics(batch: dict[str, torch.Tensor], lr: float) -> dict[str, float]:
    """The learning rate after the update, and the sizes of the batch it trained on."""
    mask = batch["loss_mask"]
    return {
        "actor/lr": lr,
        "response_length/mean": masked_mean(mask.sum(-1).float(), torch.ones_like(mask[:, 0])).item(),
        "prompt_length/mean": batch["prompt_len"].float().mean().item(),
        "train/tokens": float(batch["attention_mask"].sum()),
    }
