"""From finished episodes to a training batch: the LLM judge where the env could not score an
answer, then the expander's rows with the reward on the last policy token (``build_batch``, from
``agentrl.learn.batch``, which replay shares). Trajectories the judge failed on, and rows with no
policy token, are dropped and counted, never scored 0."""

from __future__ import annotations

import asyncio
from typing import Any

from agentrl.errors import ConfigError
from agentrl.learn.batch import build_batch, normalized_reward
from agentrl.train.config import JudgeSettings
from agentrl.trajectory import Trajectory

__all__ = ["build_batch", "judge_trajectories", "normalized_reward"]


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
