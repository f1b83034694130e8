"""From finished episodes to a training batch: the LLM judge where the env could not score an
answer (``StepJudge``, the run's one judge), then the expander's rows (``build_batch``, from
``agentrl.learn.batch``, which replay shares), whose rewards the expander placed. Trajectories the
judge failed on, and rows with no policy token, are dropped and counted, never scored 0.

The reward and its normalised value are the judge's (``agentrl.judge.normalized_reward``).
"""

from __future__ import annotations

from agentrl.errors import ConfigError
from agentrl.judge import load_rubric, make_judge, record_reward, resolve_rubric
from agentrl.judge.llm import run_sync
from agentrl.learn.batch import build_batch, normalized_reward, training_reward
from agentrl.train.config import TrainJudgeConfig
from agentrl.trajectory import Trajectory

__all__ = ["StepJudge", "build_batch", "normalized_reward", "training_reward"]


class StepJudge:
    """The run's one judge: built from the config's ``judge`` section (verdict cache, majority vote,
    concurrency and every other ``JudgeConfig`` field), used every step, closed at the end."""

    def __init__(self, config: TrainJudgeConfig) -> None:
        self.config = config
        self.rubric = load_rubric(config.rubric) if config.rubric else None
        if config.model is None and self.rubric is not None and not self.rubric.is_deterministic:
            raise ConfigError("judge.rubric has LLM criteria: set judge.model")
        self.judge = make_judge(config)

    def score(self, trajs: list[Trajectory]) -> dict[str, float]:
        """Score, in place, the trajectories the env left to the LLM judge (all of them when
        ``judge.rubric`` overrides the tasks' rubrics), recording the rubric used on each; returns
        judge metrics."""
        pending = trajs if self.rubric is not None else [t for t in trajs if t.info.get("needs_judge")]
        if not pending:
            return {}
        if self.config.model is None and self.rubric is None:
            raise ConfigError("these rubrics need the LLM judge: set judge.model")
        items = [(t, resolve_rubric(t, self.rubric)) for t in pending]
        for (t, rubric), bd in zip(items, run_sync(self.judge.score_many(items)), strict=True):
            record_reward(t, bd, rubric)
        return {
            "judge/calls": float(sum(t.reward.calls for t in pending if t.reward)),
            "judge/cache_hits": float(sum(t.reward.cache_hits for t in pending if t.reward)),
        }

    def close(self) -> None:
        """Close the judge (its verdict cache and call workers)."""
        self.judge.close()
