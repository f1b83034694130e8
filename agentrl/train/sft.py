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

from agentrl.algos import masked_mean
from agentrl.env import ResearchEnv
from agentrl.env.suite import Task
from agentrl.learn.forward import forward_logprobs
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
) -> float:
    """One optimiser step of −mean log p over the policy tokens of ``batch_size`` sampled trajectories."""
    model.train()
    device = next(model.parameters()).device
    picked = [trajectories[rng.randrange(len(trajectories))] for _ in range(batch_size)]
    batch = {k: v.to(device) for k, v in collate(expander.expand_many(picked), pad_token_id=pad_id).items()}
    lp, _ = forward_logprobs(model, batch, policy_only=True)
    loss = -masked_mean(lp, batch["loss_mask"])
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()
