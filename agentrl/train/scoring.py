"""From finished episodes to a training batch: the LLM judge where the env could not score an
answer, then the expander's rows, whose rewards the expander placed (the trajectory reward on the
last policy token, turn rewards on each turn's last policy token). Trajectories the judge failed
on, and rows with no policy token, are dropped and counted, never scored 0.

The reward and its normalised value are the judge's (``agentrl.judge.normalized_reward``); this
module only chooses which of the two a run trains on.
"""

from __future__ import annotations

import numpy as np
import torch

from agentrl.errors import ConfigError
from agentrl.judge import load_rubric, make_judge, normalized_reward, record_reward, resolve_rubric
from agentrl.judge.llm import run_sync
from agentrl.tokens import Expander, collate
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


def training_reward(traj: Trajectory, normalize: bool) -> float:
    """The trajectory reward a trainer trains on: the normalised score when ``normalize``, else the
    rubric total. The one place that chooses; the expander places the value it returns."""
    r = traj.reward
    assert r is not None and r.total is not None
    return normalized_reward(traj) if normalize else float(r.total)


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
