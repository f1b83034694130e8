"""The supervised warm start: oracle trajectories → next-token cross-entropy on the oracle's turns.

A model trained from scratch cannot find the tool-call format by exploration; a short warm start on
(noisy) oracle trajectories teaches the format and leaves the source choice to RL.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from agentrl.algos import EPS, masked_mean
from agentrl.env import ResearchEnv
from agentrl.env.suite import Task
from agentrl.learn.forward import forward_logprobs, micro_batches
from agentrl.tokens import Expander, collate
from agentrl.trajectory import Trajectory

__all__ = ["collect_oracle_trajectories", "sft_step"]


def collect_oracle_trajectories(
    env_config: dict[str, Any], tasks: Sequence[Task], noise: float, seed: int, episodes: int | None = None
) -> list[Trajectory]:
    """``episodes`` oracle episodes (default: one per task), cycling through ``tasks`` with a new
    sample index each round, so that a small suite still yields varied data: the oracle opens a
    distractor with probability ``noise``, drawn per episode."""
    from agentrl.policy import OraclePolicy
    from agentrl.rollout import run_policy_episode

    policy = OraclePolicy(noise=noise)
    n = len(tasks) if episodes is None else episodes
    jobs = [(tasks[i % len(tasks)], i // len(tasks)) for i in range(n)]

    async def run_all() -> list[Trajectory]:
        envs = [ResearchEnv(env_config) for _ in jobs]
        return await asyncio.gather(
            *(
                run_policy_episode(env, policy, task, sample, seed)
                for env, (task, sample) in zip(envs, jobs, strict=True)
            )
        )

    return asyncio.run(run_all())


def sft_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    expander: Expander,
    trajectories: Sequence[Trajectory],
    *,
    batch_size: int,
    rng: random.Random,
    pad_id: int,
    grad_clip: float = 1.0,
    micro_batch_tokens: int | None = None,
) -> float:
    """One optimiser step of −mean log p over the policy tokens of ``batch_size`` sampled trajectories.

    ``micro_batch_tokens``: the forward and backward passes run on micro-batches of at most that
    many (padded) tokens, their gradients summed, each micro-batch's loss divided by the policy
    tokens of the whole batch — the same gradient as one pass over the batch, with the memory of
    one micro-batch (a pretrained model's attention and vocabulary make a whole batch of
    multi-turn rows tens of GB). A batch within the budget, or None: one pass."""
    model.train()
    device = next(model.parameters()).device
    picked = [trajectories[rng.randrange(len(trajectories))] for _ in range(batch_size)]
    batch = {k: v.to(device) for k, v in collate(expander.expand_many(picked), pad_token_id=pad_id).items()}
    if micro_batch_tokens is None or batch["input_ids"].numel() <= micro_batch_tokens:
        lp, _ = forward_logprobs(model, batch, policy_only=True)
        loss = -masked_mean(lp, batch["loss_mask"])
        loss.backward()
        total = loss.item()
    else:  # Σ over micro-batches of −Σ lp·m / (Σ m of the batch + EPS): masked_mean's value
        denom = batch["loss_mask"].sum() + EPS
        total = 0.0
        for mb in micro_batches(batch, torch.arange(len(picked), device=device), micro_batch_tokens):
            lp, _ = forward_logprobs(model, mb, policy_only=True)
            loss = -(lp * mb["loss_mask"]).sum() / denom
            loss.backward()
            total += loss.item()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return total
