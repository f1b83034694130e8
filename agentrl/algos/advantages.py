"""Advantage estimators over token sequences: GAE (PPO), GRPO, RLOO and REINFORCE++.

Every estimator works on policy tokens only (``response_mask == 1``). Masked positions (tool
observations, template tokens, padding) are *skipped*, not treated as episode ends: the last
policy token before an observation bootstraps from the first policy token after it, which is what
verl's GAE does since PR #2337. Outputs are 0 on masked positions.

The time recursions are vectorised: policy tokens are compacted to the front of each row, the
constant-factor scan y_k = x_k + c·y_{k+1} is computed as a two-level blocked matrix product, and
the result is scattered back. No Python loop over time.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from agentrl.algos.reduce import LOCAL, Reduce
from agentrl.algos.stats import masked_whiten

__all__ = [
    "discounted_reverse_cumsum",
    "gae",
    "grpo_advantages",
    "reinforce_pp_advantages",
    "rloo_advantages",
    "td_residuals",
]

_CHUNK = 64


def _scan_dtype(x: torch.Tensor) -> torch.dtype:
    """float64 inputs are scanned in float64 (not on MPS, which lacks it); everything else in float32."""
    return torch.float64 if x.dtype == torch.float64 and x.device.type != "mps" else torch.float32


def discounted_reverse_cumsum(x: torch.Tensor, c: float) -> torch.Tensor:
    """y[:, k] = Σ_{j ≥ k} c^(j−k) · x[:, j], i.e. y_k = x_k + c·y_{k+1} with y_N = 0.

    x: [B, N] → [B, N], accumulated in float64 for float64 input, else float32. Two levels of
    blocked matrix products: within chunks of 64 steps, then across chunks with factor c^64,
    so no power of c is ever inverted and long sequences do not overflow.
    """
    B, N = x.shape
    if N == 0:
        return x.clone()
    dt = _scan_dtype(x)
    C = min(_CHUNK, N)
    K = -(-N // C)
    xs = torch.zeros(B, K * C, dtype=dt, device=x.device)
    xs[:, :N] = x.to(dt)
    xs = xs.view(B, K, C)
    c = float(c)

    def upper_powers(n: int, base: float) -> torch.Tensor:
        ar = torch.arange(n, device=x.device)
        diff = (ar[None, :] - ar[:, None]).to(dt)  # [i, j] = j − i
        return torch.where(diff >= 0, torch.tensor(base, dtype=dt, device=x.device) ** diff.clamp_min(0), 0.0)

    U = upper_powers(C, c)  # U[i, j] = c^(j−i) for j ≥ i
    intra = xs @ U.T  # [B, K, C]: the sum restricted to each chunk
    W = upper_powers(K, c**C)  # W[k, m] = c^(C·(m−k)) for m ≥ k
    H = intra[:, :, 0] @ W.T  # [B, K]: y at the first step of every chunk
    carry = torch.cat([H[:, 1:], H.new_zeros(B, 1)], dim=1)  # y at the first step of the next chunk
    tail = torch.tensor(c, dtype=dt, device=x.device) ** (C - torch.arange(C, device=x.device)).to(dt)
    y = intra + tail[None, None, :] * carry[:, :, None]
    return y.reshape(B, K * C)[:, :N].to(x.dtype)


def _compact_positions(mask: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Each position's index among its row's policy tokens, and the width W = the most policy tokens
    in a row. Masked positions get W, a spare slot that is dropped. mask: [B, T] bool → ([B, T], W)."""
    # int32 and in place: an int64 cumsum and out-of-place int64 ops cost ~4x more on CPU.
    counts = torch.cumsum(mask, -1, dtype=torch.int32)
    width = int(counts[:, -1].max()) if counts.numel() else 0
    counts.sub_(1).masked_fill_(~mask, width)
    return counts.long(), width


def _compact(x: torch.Tensor, pos: torch.Tensor, width: int) -> torch.Tensor:
    """Move the policy tokens of each row to its front, in order, zeros after them. [B, T] → [B, W]."""
    out = torch.zeros(x.shape[0], width + 1, dtype=x.dtype, device=x.device)
    out.scatter_(1, pos, x)
    return out[:, :width]


def _expand(y: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Inverse of ``_compact``: compacted values back at their positions, 0 on masked ones. → [B, T]."""
    zero = torch.zeros((), dtype=y.dtype, device=y.device)
    if y.shape[-1] == 0:
        return zero.expand(mask.shape).clone()
    return torch.where(mask, y.gather(1, pos.clamp(max=y.shape[-1] - 1)), zero)


def _check_2d(**tensors: torch.Tensor) -> None:
    shapes = {k: tuple(v.shape) for k, v in tensors.items()}
    first = next(iter(shapes.values()))
    if len(first) != 2 or any(s != first for s in shapes.values()):
        raise ValueError(f"expected [B, T] tensors of one shape, got {shapes}")


def _compact_deltas(rewards, values, mask, gamma):
    """δ over the compacted policy tokens of each row, with their positions: ([B, W], pos [B, T])."""
    _check_2d(token_level_rewards=rewards, values=values, response_mask=mask)
    pos, width = _compact_positions(mask)
    dt = _scan_dtype(values)
    r = _compact(rewards.to(dt), pos, width)
    v = _compact(values.to(dt), pos, width)
    v_next = torch.cat([v[:, 1:], v.new_zeros(v.shape[0], 1)], dim=1)
    return r + gamma * v_next - v, pos


def td_residuals(
    token_level_rewards: torch.Tensor, values: torch.Tensor, response_mask: torch.Tensor, gamma: float
) -> torch.Tensor:
    """δ_t = r_t + γ·V(next policy token) − V_t on policy tokens (V after the last one is 0); 0 elsewhere.

    token_level_rewards, values, response_mask: [B, T] → [B, T].
    """
    mask = response_mask.bool()
    delta, pos = _compact_deltas(token_level_rewards, values, mask, gamma)
    return _expand(delta, pos, mask).to(values.dtype)


def gae(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 0.95,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over policy tokens; returns ``(advantages, returns)``, not whitened.

    δ_t = r_t + γ·V_{t'} − V_t and A_t = δ_t + γλ·A_{t'}, where t' is the next policy token after t
    (masked positions are skipped; after the last policy token V = A = 0). ``returns = advantages +
    values``. Rewards and values on masked positions are never read; both outputs are 0 there.

    token_level_rewards, values, response_mask: [B, T] → ([B, T], [B, T]) in ``values.dtype``.
    """
    with torch.no_grad():
        mask = response_mask.bool()
        delta, pos = _compact_deltas(token_level_rewards, values, mask, gamma)
        adv = _expand(discounted_reverse_cumsum(delta, gamma * lam), pos, mask).to(values.dtype)
        ret = torch.where(mask, adv + values, torch.zeros((), dtype=values.dtype, device=values.device))
    return adv, ret


def _group_index(
    group_ids: torch.Tensor | Sequence[Hashable], device: torch.device, reduce: Reduce
) -> tuple[torch.Tensor, int]:
    """Each row's group as an index into every rank's groups (0..G−1, the same numbering on every
    rank: first appearance in rank order), and G. group_ids: [B] tensor or list of hashables."""
    ids = group_ids.tolist() if isinstance(group_ids, torch.Tensor) else list(group_ids)
    index: dict[Hashable, int] = {}
    for part in reduce.gather(ids):
        for g in part:
            index.setdefault(g, len(index))
    return torch.tensor([index[g] for g in ids], dtype=torch.long, device=device), len(index)


def _group_stats(scores: torch.Tensor, group_ids: torch.Tensor | Sequence[Hashable], reduce: Reduce):
    """Per-trajectory group size, mean, unbiased std and an 'all scores equal' flag, each [B], and the
    deviation from the group mean. A group's members may sit on different ranks: its count, Σs and
    Σ(s − mean)² are summed over ranks, its max and min taken over ranks."""
    inv, G = _group_index(group_ids, scores.device, reduce)
    s = scores.to(torch.float64)
    zeros = torch.zeros(G, dtype=torch.float64, device=s.device)
    n, total = reduce.sum(
        torch.stack([zeros.index_add(0, inv, torch.ones_like(s)), zeros.index_add(0, inv, s)])
    )
    mean = total / n
    dev = s - mean[inv]
    var = reduce.sum(zeros.index_add(0, inv, dev**2)) / (n - 1).clamp_min(1)
    hi = torch.full_like(zeros, -torch.inf).scatter_reduce_(0, inv, s, "amax")
    neg_lo = torch.full_like(zeros, -torch.inf).scatter_reduce_(0, inv, -s, "amax")
    hi, neg_lo = reduce.max(torch.stack([hi, neg_lo]))
    return n[inv], mean[inv], var.sqrt()[inv], (hi == -neg_lo)[inv], dev


def grpo_advantages(
    scores: torch.Tensor,
    group_ids: torch.Tensor | Sequence[Hashable],
    response_mask: torch.Tensor,
    norm_by_std: bool = True,
    eps: float = 1e-6,
    *,
    reduce: Reduce = LOCAL,
) -> torch.Tensor:
    """GRPO: each trajectory's score normalised within its group, broadcast over its policy tokens.

    A_i = (s_i − mean_g) / (std_g + eps) with the unbiased std of the group; ``norm_by_std=False``
    gives Dr. GRPO's A_i = s_i − mean_g. A singleton group or a group whose scores are all equal
    gets exactly 0 (never NaN). Groups are taken over every rank of ``reduce``: a group whose members
    sit on different ranks gets the statistics of all its members.

    scores: [B]; group_ids: [B] (tensor or list of hashables, e.g. task ids); response_mask: [B, T]
    → advantages [B, T], 0 on masked positions.
    """
    n, _, std, tied, dev = _group_stats(scores, group_ids, reduce)
    adv = dev / (std + eps) if norm_by_std else dev
    adv = torch.where((n > 1) & ~tied, adv, torch.zeros_like(adv))
    return adv.to(scores.dtype)[:, None] * response_mask.to(scores.dtype)


def rloo_advantages(
    scores: torch.Tensor,
    group_ids: torch.Tensor | Sequence[Hashable],
    response_mask: torch.Tensor,
    *,
    reduce: Reduce = LOCAL,
) -> torch.Tensor:
    """RLOO: A_i = s_i − mean of the *other* scores in its group, broadcast over policy tokens.

    Equals n/(n−1)·(s_i − mean_g). Singleton and all-equal groups get 0. Groups span the ranks of
    ``reduce`` as in ``grpo_advantages``.
    scores: [B]; group_ids: [B]; response_mask: [B, T] → [B, T].
    """
    n, _, _, tied, dev = _group_stats(scores, group_ids, reduce)
    adv = dev * n / (n - 1).clamp_min(1)
    adv = torch.where((n > 1) & ~tied, adv, torch.zeros_like(adv))
    return adv.to(scores.dtype)[:, None] * response_mask.to(scores.dtype)


def reinforce_pp_advantages(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float = 1.0,
    *,
    reduce: Reduce = LOCAL,
) -> torch.Tensor:
    """REINFORCE++: the discounted reward-to-go over policy tokens, whitened over the batch (every
    rank's policy tokens, through ``reduce``: whitening one rank's shard alone is a different step).

    G_t = r_t + γ·G_{t'} with t' the next policy token: observation tokens are skipped rather than
    ending the return (verl resets at them, which cuts a multi-turn reward off from earlier turns).
    token_level_rewards, response_mask: [B, T] → [B, T], 0 on masked positions.
    """
    _check_2d(token_level_rewards=token_level_rewards, response_mask=response_mask)
    with torch.no_grad():
        mask = response_mask.bool()
        pos, width = _compact_positions(mask)
        r = _compact(token_level_rewards.to(_scan_dtype(token_level_rewards)), pos, width)
        returns = _expand(discounted_reverse_cumsum(r, gamma), pos, mask)
        adv = masked_whiten(returns, mask, reduce=reduce) * mask
    return adv.to(token_level_rewards.dtype)
