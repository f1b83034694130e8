"""From scored trajectories to the tensors of one update: the expander's rows, whose rewards the
expander placed (the trajectory reward on the last policy token, turn rewards on each turn's last
policy token). Trajectories the judge failed on, and rows with no policy token, are dropped and
counted, never scored 0. The trainer and ``agentrl replay`` build their batches here; whether a
trajectory trains and on which number is the reward contract's (``agentrl.trajectory.training_reward``)."""

from __future__ import annotations

import numpy as np
import torch

from agentrl.tokens import Expander, collate, sampled_segments, segment_row_id
from agentrl.trajectory import Trajectory, normalized_reward, training_reward

__all__ = ["build_batch", "is_truncated", "normalized_reward", "row_ids", "training_reward"]


def is_truncated(traj: Trajectory) -> bool:
    """The episode was cut by a budget (turns, tokens, length, time) before it gave a report: the
    multi-turn form of DAPO's truncated response, which ``algorithm.overlong.mask_truncated`` leaves
    out of the policy loss."""
    return traj.info.get("truncated_reason") is not None and not traj.info.get("terminated")


def build_batch(
    trajs: list[Trajectory], expander: Expander, *, normalize: bool, pad_id: int, device: torch.device
) -> tuple[list[Trajectory], dict[str, torch.Tensor], dict[str, float]]:
    """The trainable trajectories (one per row: an episode whose context was rewritten has a row per
    context segment, ``expand_segments``, and then ``episode`` [B] and ``segment`` [B] say which
    episode and segment each row is, and ``outcome`` [B] the episode's reward each row carries), their collated rows (plus ``known_logprobs``, 1 where the
    sampler's log-prob is known, and ``truncated`` [B], 1 for an episode ``is_truncated``) and drop counts. The scores are the expander's, untouched: the reward
    (``training_reward``: normalised when ``normalize``) on the last policy token, plus the
    trajectory's ``info["turn_rewards"]`` on each turn's last policy token."""
    keep, rows, dropped_judge, dropped_empty = [], [], 0, 0
    episodes = 0  # trajectories kept
    episode: list[int] = []  # the row's episode (its index among the kept trajectories)
    segment: list[int] = []  # the row's context segment within its episode
    outcome: list[float] = []  # the episode's reward, on the last policy token of each of its rows
    for t in trajs:
        reward = training_reward(t, normalize)
        if reward is None:
            dropped_judge += 1
            continue
        parts = sampled_segments(expander, t, reward=reward)  # one row per segment (most have one)
        if not parts:
            dropped_empty += 1
            continue
        for seg, row in parts:
            keep.append(t)
            rows.append(row)
            episode.append(episodes)
            segment.append(seg.index)
            outcome.append(float(reward))
        episodes += 1
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
    batch["truncated"] = torch.tensor([float(is_truncated(t)) for t in keep], device=device)
    if episodes < len(rows):  # an episode with a rewritten context: its rows share one outcome
        batch["episode"] = torch.tensor(episode, dtype=torch.int64, device=device)
        batch["segment"] = torch.tensor(segment, dtype=torch.int64, device=device)
        batch["outcome"] = torch.tensor(outcome, dtype=torch.float32, device=device)
    return keep, batch, stats


def row_ids(keep: list[Trajectory], batch: dict[str, torch.Tensor]) -> list[str]:
    """The id of each row of ``build_batch``'s batch: its trajectory's, ``ID#k`` for context segment
    k > 0 (``agentrl.tokens.segment_row_id``)."""
    segment = batch["segment"].tolist() if "segment" in batch else [0] * len(keep)
    return [segment_row_id(t.id, k) for t, k in zip(keep, segment, strict=True)]
