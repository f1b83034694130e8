"""From finished episodes to a training batch: the LLM judge where the env could not score an
answer, then the expander's rows, whose rewards the expander placed (the trajectory reward on the
last policy token, turn rewards on each turn's last policy token). Trajectories the judge failed
on, and rows with no policy token, are dropped and counted, never scored 0."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import torch

from agentrl.errors import ConfigError
from agentrl.tokens import Expander, collate
from agentrl.train.config import JudgeSettings
from agentrl.trajectory import Trajectory

__all__ = ["build_batch", "judge_trajectories", "normalized_reward", "training_reward"]


def normalized_reward(traj: Trajectory) -> float:
    """The reward on [0, 1]: clip(total / Σ positive weights of its rubric, 0, 1), as the rubric's
    ``normalized`` aggregation would give; the total itself when the rubric already normalizes,
    or when no criterion was graded (an unanswered episode's 0)."""
    r = traj.reward
    assert r is not None and r.total is not None
    pos = sum(c.weight for c in r.criteria if c.weight > 0)
    if r.aggregation == "normalized" or pos <= 0:
        return r.total
    return min(max(r.total / pos, 0.0), 1.0)


def training_reward(traj: Trajectory, normalize: bool) -> float:
    """The trajectory reward a trainer trains on: the normalised score when ``normalize``, else the
    rubric total. The one place that chooses; the expander places the value it returns."""
    r = traj.reward
    assert r is not None and r.total is not None
    return normalized_reward(traj) if normalize else float(r.total)


def judge_trajectories(trajs: list[Trajectory], settings: JudgeSettings, suite: Any) -> dict[str, float]:
    """Score, in place, the trajectories the env left to the LLM judge (all of them when
    ``settings.rubric`` overrides the tasks' rubrics); returns judge metrics."""
    pending = trajs if settings.rubric is not None else [t for t in trajs if t.info.get("needs_judge")]
    if not pending:
        return {}
    from agentrl.judge import Judge, JudgeConfig, load_rubric, parse_rubric

    fixed = load_rubric(settings.rubric) if settings.rubric else None
    if settings.model is None and (fixed is None or not fixed.is_deterministic):
        raise ConfigError("these rubrics need the LLM judge: set judge.model")
    judge = Judge(
        JudgeConfig(model=settings.model, api_base=settings.api_base, concurrency=settings.concurrency)
    )
    items = [(t, fixed or parse_rubric(suite.rubric_data(suite.task(t.task_id)))) for t in pending]
    for t, bd in zip(pending, asyncio.run(judge.score_many(items)), strict=True):
        t.reward = bd
        t.info["needs_judge"] = False
    return {"judge/calls": float(sum(t.reward.calls for t in pending if t.reward))}


def build_batch(
    trajs: list[Trajectory], expander: Expander, *, normalize: bool, pad_id: int, device: torch.device
) -> tuple[list[Trajectory], dict[str, torch.Tensor], dict[str, float]]:
    """The trainable trajectories, their collated rows (plus ``known_logprobs``, 1 where the sampler's
    log-prob is known) and drop counts. The scores are the expander's, untouched: the reward
    (``training_reward``: normalised when ``normalize``) on the last policy token, plus the
    trajectory's ``info["turn_rewards"]`` on each turn's last policy token."""
    keep, rows, dropped_judge, dropped_empty = [], [], 0, 0
    for t in trajs:
        if t.reward is None or t.reward.status != "ok" or t.reward.total is None:
            dropped_judge += 1
            continue
        row = expander.expand(t, reward=training_reward(t, normalize))
        if not row.loss_mask.any():
            dropped_empty += 1
            continue
        keep.append(t)
        rows.append(row)
    stats = {
        "train/dropped_judge_error": float(dropped_judge),
        "train/dropped_untrainable": float(dropped_empty),
    }
    if not rows:
        return keep, {}, stats
    batch = {k: v.to(device) for k, v in collate(rows, pad_token_id=pad_id).items()}
    known = np.zeros(tuple(batch["input_ids"].shape), dtype=np.int64)
    for i, r in enumerate(rows):
        known[i, : len(r)] = r.known_logprob_mask()
    batch["known_logprobs"] = torch.from_numpy(known).to(device)
    return keep, batch, stats
