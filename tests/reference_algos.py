"""Slow, obviously-correct references for agentrl.algos, written as plain per-timestep loops.

Used by the tests (as the oracle) and by the GAE benchmark (as the baseline the vectorised code
is measured against). These are deliberately the textbook recursions, one step at a time.
"""

from __future__ import annotations

import torch


def gae_loop(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float):
    """verl-style GAE: walk backwards; on masked steps carry the next value and advantage unchanged."""
    B, T = rewards.shape
    next_value = torch.zeros(B, dtype=values.dtype)
    last_adv = torch.zeros(B, dtype=values.dtype)
    adv = torch.zeros_like(values)
    for t in reversed(range(T)):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        new_adv = delta + gamma * lam * last_adv
        m = mask[:, t]
        next_value = values[:, t] * m + (1 - m) * next_value
        last_adv = new_adv * m + (1 - m) * last_adv
        adv[:, t] = last_adv
    adv = adv * mask
    return adv, (adv + values) * mask


def gae_python(rewards, values, mask, gamma, lam):
    """The same recursion on Python floats, row by row, over the list of policy positions."""
    out_a = [[0.0] * len(r) for r in rewards]
    out_r = [[0.0] * len(r) for r in rewards]
    for b in range(len(rewards)):
        pos = [t for t, m in enumerate(mask[b]) if m]
        next_v, next_a = 0.0, 0.0
        for t in reversed(pos):
            delta = rewards[b][t] + gamma * next_v - values[b][t]
            a = delta + gamma * lam * next_a
            out_a[b][t], out_r[b][t] = a, a + values[b][t]
            next_v, next_a = values[b][t], a
    return out_a, out_r


def reward_to_go_python(rewards, mask, gamma):
    """G_t = r_t + γ·G(next policy token), on Python floats; 0 on masked positions."""
    out = [[0.0] * len(r) for r in rewards]
    for b in range(len(rewards)):
        g = 0.0
        for t in reversed([t for t, m in enumerate(mask[b]) if m]):
            g = rewards[b][t] + gamma * g
            out[b][t] = g
    return out


def group_stats_python(scores, groups):
    """Per-group lists of scores, keyed by group id."""
    by: dict = {}
    for s, g in zip(scores, groups, strict=True):
        by.setdefault(g, []).append(s)
    return by
