"""From scored trajectories to the tensors of one update: the expander's rows with the reward on the
last policy token. Trajectories the judge failed on, and rows with no policy token, are dropped and
counted, never scored 0. The trainer and ``agentrl replay`` build their batches here."""

from __future__ import annotations

import numpy as np
import torch

from agentrl.tokens import Expander, collate
from agentrl.trajectory import Trajectory

__all__ = ["build_batch", "normalized_reward"]


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


def build_batch(
    trajs: list[Trajectory], expander: Expander, *, normalize: bool, pad_id: int, device: torch.device
) -> tuple[list[Trajectory], dict[str, torch.Tensor], dict[str, float]]:
    """The trainable trajectories, their collated rows (plus ``known_logprobs``, 1 where the sampler's
    log-prob is known) and drop counts. The reward — normalised when ``normalize`` — is the only
    score, on the last policy token."""
    keep, rows, dropped_judge, dropped_empty = [], [], 0, 0
    for t in trajs:
        if t.reward is None or t.reward.status != "ok" or t.reward.total is None:
            dropped_judge += 1
            continue
        row = expander.expand(t)
        on = np.flatnonzero(row.loss_mask)
        if on.size == 0:
            dropped_empty += 1
            continue
        row.token_level_scores[:] = 0.0
        row.token_level_scores[on[-1]] = normalized_reward(t) if normalize else t.reward.total
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
