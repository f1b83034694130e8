"""Policy rollouts for training: many episodes stepped in lock-step, one batched sampling call per turn.

The policy conditions on exactly the ids the token expander will train on: the context of every
turn is the expander's row for the conversation so far plus the generation prompt, with earlier
turns as sampled (token-in-token-out). Each episode samples with seeds derived from its own
(seed, task, sample, turn), so the result does not depend on batch composition or thread timing.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from agentrl.env import ResearchEnv
from agentrl.env.suite import Task
from agentrl.tokens import Expander, sampled_message
from agentrl.train.generate import sample_batch
from agentrl.trajectory import Trajectory

__all__ = ["Job", "finish_episode", "run_policy_episodes", "turn_seed"]


@dataclass(frozen=True)
class Job:
    """One episode to run: a task, its sample index within the group, and the episode seed."""

    task: Task
    sample: int
    seed: int


def turn_seed(seed: int, turn: int) -> int:
    """The sampling seed of one turn of an episode."""
    digest = hashlib.sha256(f"{seed}:{turn}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & 0x7FFFFFFFFFFFFFFF


def finish_episode(env: ResearchEnv, job: Job, reason: str | None) -> Trajectory:
    # The env records the outcome: an episode stopped here without a report is unanswered, reward 0.
    traj = env.trajectory(id=f"{job.task.id}#{job.sample}", stop_reason=reason)
    traj.info["sample"] = job.sample
    traj.info["seed"] = job.seed
    return traj


def run_policy_episodes(
    model: nn.Module,
    tokenizer: Any,
    expander: Expander,
    envs: Sequence[ResearchEnv],
    jobs: Sequence[Job],
    *,
    max_new_tokens: int,
    max_len: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    stop_ids: set[int],
    pad_id: int,
    executor: cf.Executor | None = None,
) -> list[Trajectory]:
    """Run ``jobs`` on ``envs`` (one env each) with the model as policy; returns one trajectory per job.

    An episode ends when the env terminates or truncates it, when a turn hits ``max_new_tokens``
    without a stop token (``generation_limit``), or when the next context would exceed ``max_len``.
    Unanswered episodes get reward 0 with the reason (they are trainable, unlike judge errors).
    """
    if len(envs) < len(jobs):
        raise ValueError("one env per job")
    for env, job in zip(envs, jobs, strict=False):
        env.reset(seed=job.seed, options={"task": job.task})
    results: dict[int, Trajectory] = {}
    active = list(range(len(jobs)))
    turn = 0
    own_pool = executor is None
    pool = executor or cf.ThreadPoolExecutor(max_workers=8)
    try:
        while active:
            prompts, live = [], []
            for i in active:
                p = expander.generation_prompt_ids(envs[i].messages)
                if len(p) + max_new_tokens > max_len:
                    results[i] = finish_episode(envs[i], jobs[i], "max_len")
                else:
                    prompts.append(p)
                    live.append(i)
            samples = sample_batch(
                model,
                prompts,
                seeds=[turn_seed(jobs[i].seed, turn) for i in live],
                stop_ids=stop_ids,
                pad_id=pad_id,
                max_new_tokens=max_new_tokens,
                temperature=temperature,
                top_p=top_p,
            )

            def step(i: int, s: Any) -> tuple[int, bool, str | None]:
                msg = sampled_message(tokenizer, s.token_ids, s.logprobs, s.finish_reason, stop_ids)
                _, _, terminated, truncated, _ = envs[i].step(msg)
                if terminated or truncated:
                    return i, True, None
                if s.finish_reason == "length":
                    return i, True, "generation_limit"
                return i, False, None

            active = []
            for i, done, reason in pool.map(lambda a: step(*a), zip(live, samples, strict=True)):
                if done:
                    results[i] = finish_episode(envs[i], jobs[i], reason)
                else:
                    active.append(i)
            turn += 1
    finally:
        if own_pool:
            pool.shutdown()
    return [results[i] for i in range(len(jobs))]
