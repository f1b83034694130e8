"""The supervised warm start: oracle trajectories → next-token cross-entropy on the oracle's turns.

A model trained from scratch cannot find the tool-call format by exploration; a short warm start on
(noisy) oracle trajectories teaches the format and leaves the source choice to RL.

With context management (``rollout.context``) the warm start must train on what the policy will
see: the oracle then plays in token mode through the run's expander and context policy, so a long
episode carries its context segments, and every segment is one row (``expand_segments``) whose loss
is on that segment's own turns. Without it, a chat-mode episode longer than ``max_len`` is one row
cut at ``max_len`` (its later turns are not trained).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from agentrl.algos import EPS, masked_mean
from agentrl.env import ResearchEnv
from agentrl.env.suite import Task
from agentrl.learn.forward import forward_logprobs, micro_batches
from agentrl.tokens import Expander, TokenizedTrajectory, collate, expand_segments
from agentrl.trajectory import Trajectory

if TYPE_CHECKING:
    from agentrl.rollout.episode import Limits

__all__ = ["collect_oracle_trajectories", "sft_rows", "sft_step", "sft_update"]


def collect_oracle_trajectories(
    env_config: dict[str, Any],
    tasks: Sequence[Task],
    noise: float,
    seed: int,
    episodes: int | None = None,
    *,
    expander: Expander | None = None,
    limits: Limits | None = None,
) -> list[Trajectory]:
    """``episodes`` oracle episodes (default: one per task), cycling through ``tasks`` with a new
    sample index each round, so that a small suite still yields varied data: the oracle opens a
    distractor with probability ``noise``, drawn per episode.

    With ``expander`` the oracle plays in token mode, as the trainer's sampler would: each turn is
    its text's ids plus the expander's first stop id (cut to the turn's token limit), and the episode
    loop applies ``limits`` (an ``agentrl.rollout.episode.Limits``: ``max_len``, ``max_new_tokens``,
    the context policy), so a long episode records its context segments. The episodes (ids, reset
    seeds, ``info``) are those of chat mode."""
    from agentrl.policy import OraclePolicy
    from agentrl.rollout import run_policy_episode
    from agentrl.rollout.episode import Generation, Limits, run_episode
    from agentrl.rollout.runner import policy_episode_spec

    policy = OraclePolicy(noise=noise)
    n = len(tasks) if episodes is None else episodes
    jobs = [(tasks[i % len(tasks)], i // len(tasks)) for i in range(n)]

    async def in_tokens(req: Any) -> Generation:
        assert expander is not None
        msg = await policy.act(req.messages, req.context())
        ids = [*expander.tokenizer.encode(msg.text, add_special_tokens=False), min(expander.stop_ids)]
        return Generation(ids[: req.max_tokens], None)

    async def one(env: ResearchEnv, task: Task, sample: int) -> Trajectory:
        if expander is None:
            return await run_policy_episode(env, policy, task, sample, seed)
        spec = policy_episode_spec(task, sample, seed, policy.name)  # as run_policy_episode's
        res = await run_episode(env, spec, in_tokens, expander=expander, limits=limits or Limits())
        return res.trajectory

    async def run_all() -> list[Trajectory]:
        envs = [ResearchEnv(env_config) for _ in jobs]
        return await asyncio.gather(
            *(one(env, task, sample) for env, (task, sample) in zip(envs, jobs, strict=True))
        )

    return asyncio.run(run_all())


def sft_rows(expander: Expander, trajectories: Sequence[Trajectory]) -> list[TokenizedTrajectory]:
    """The warm start's rows of ``trajectories``: one per context segment of each
    (``expand_segments``, the loss on that segment's own turns), so a trajectory that was never
    rewritten is its one ``expand`` row."""
    return [row for t in trajectories for row in expand_segments(expander, t)]


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
    """One optimiser step (``sft_update``) on ``batch_size`` trajectories drawn from ``trajectories``
    with replacement by ``rng``."""
    picked = [trajectories[rng.randrange(len(trajectories))] for _ in range(batch_size)]
    return sft_update(
        model,
        optimizer,
        expander,
        picked,
        pad_id=pad_id,
        grad_clip=grad_clip,
        micro_batch_tokens=micro_batch_tokens,
    )


def sft_update(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    expander: Expander,
    picked: Sequence[Trajectory],
    *,
    pad_id: int,
    grad_clip: float = 1.0,
    micro_batch_tokens: int | None = None,
) -> float:
    """One optimiser step of −mean log p over the policy tokens of the trajectories ``picked`` (every
    context segment of each is a row, ``sft_rows``); returns the loss.

    ``micro_batch_tokens``: the forward and backward passes run on micro-batches of at most that
    many (padded) tokens, their gradients summed, each micro-batch's loss divided by the policy
    tokens of the whole batch — the same gradient as one pass over the batch, with the memory of
    one micro-batch (a pretrained model's attention and vocabulary make a whole batch of
    multi-turn rows tens of GB). A batch within the budget, or None: one pass."""
    model.train()
    device = next(model.parameters()).device
    rows = sft_rows(expander, picked)
    batch = {k: v.to(device) for k, v in collate(rows, pad_token_id=pad_id).items()}
    if micro_batch_tokens is None or batch["input_ids"].numel() <= micro_batch_tokens:
        lp, _ = forward_logprobs(model, batch, policy_only=True)
        loss = -masked_mean(lp, batch["loss_mask"])
        loss.backward()
        total = loss.item()
    else:  # Σ over micro-batches of −Σ lp·m / (Σ m of the batch + EPS): masked_mean's value
        denom = batch["loss_mask"].sum() + EPS
        total = 0.0
        for mb in micro_batches(batch, torch.arange(len(rows), device=device), micro_batch_tokens):
            lp, _ = forward_logprobs(model, mb, policy_only=True)
            loss = -(lp * mb["loss_mask"]).sum() / denom
            loss.backward()
            total += loss.item()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return total + 0.0  # -0.0 (no token to learn: −mean of nothing) is shown as 0.0000
