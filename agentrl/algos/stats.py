"""Masked batch statistics: the mean, variance and whitening that every estimator shares.

Statistics are taken over the positions where ``mask`` is 1 across the whole batch (not per row),
as in verl. ``eps = 1e-8`` guards the divisions. When ranks each hold a shard of the batch's rows,
the injected ``reduce`` (see ``agentrl.algos.reduce``) sums the counts, Σx and Σ(x − mean)² over
ranks before dividing, so every rank gets the statistic of the whole batch.
"""

from __future__ import annotations

import torch

from agentrl.algos.reduce import LOCAL, Reduce

__all__ = ["EPS", "explained_variance", "masked_mean", "masked_sum", "masked_var", "masked_whiten"]

EPS = 1e-8


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``x`` where ``mask`` is 1. Masked entries are excluded even when they are inf or NaN.

    x, mask: same shape (e.g. [B, T]); returns a scalar, or the shape without ``dim``.
    """
    xm = torch.where(mask.bool(), x, torch.zeros((), dtype=x.dtype, device=x.device))
    return xm.sum() if dim is None else xm.sum(dim=dim)


def _count_and_mean(x: torch.Tensor, mask: torch.Tensor, reduce: Reduce) -> tuple[torch.Tensor, torch.Tensor]:
    """(n, mean) over the masked positions of every rank: one reduction of [Σ x·m, Σ m]."""
    sums = reduce.sum(torch.stack([masked_sum(x, mask), mask.to(x.dtype).sum()]))
    n = sums[1]
    return n, sums[0] / (n + EPS)


def masked_mean(
    x: torch.Tensor, mask: torch.Tensor, dim: int | None = None, *, reduce: Reduce = LOCAL
) -> torch.Tensor:
    """Mean of ``x`` over positions where ``mask`` is 1: Σ x·m / (Σ m + 1e-8).

    x, mask: [B, T] (any equal shapes); ``dim=None`` gives the batch-wide scalar (summed over the
    ranks of ``reduce``), ``dim=-1`` a per-row mean of shape [B] (rows are never split, so ``reduce``
    plays no part). An all-zero mask gives 0, not NaN.
    """
    if dim is not None:
        m = mask.to(x.dtype)
        return masked_sum(x, mask, dim) / (m.sum(dim=dim) + EPS)
    return _count_and_mean(x, mask, reduce)[1]


def _moments(
    x: torch.Tensor, mask: torch.Tensor, unbiased: bool, reduce: Reduce
) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, variance) over masked positions of every rank, in two passes (no Σx² cancellation)."""
    n, mean = _count_and_mean(x, mask, reduce)
    var = reduce.sum(masked_sum((x - mean) ** 2, mask)) / (n + EPS)
    if unbiased:
        var = torch.where(n > 1, var * n / (n - 1).clamp_min(1), var)
    return mean, var


def masked_var(
    x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True, *, reduce: Reduce = LOCAL
) -> torch.Tensor:
    """Batch-wide variance of ``x`` over masked positions (scalar), over the ranks of ``reduce``.

    ``unbiased`` applies Bessel's correction n/(n-1) with n the count over every rank. verl raises
    when n ≤ 1; here the correction is skipped for n ≤ 1 instead (the variance of one element is 0),
    so a batch with a single policy token whitens to 0 rather than crashing a training run.
    """
    return _moments(x, mask, unbiased, reduce)[1]


def masked_whiten(
    x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, *, reduce: Reduce = LOCAL
) -> torch.Tensor:
    """(x − mean) / sqrt(var + 1e-8) with mean and unbiased var over masked positions of every rank.

    Applied elementwise to every position (as verl does); multiply by ``mask`` for zeros elsewhere.
    ``shift_mean=False`` adds the mean back (scale only). x, mask: [B, T] → [B, T].
    """
    mean, var = _moments(x, mask, True, reduce)
    whitened = (x - mean) * torch.rsqrt(var + EPS)
    if not shift_mean:
        whitened = whitened + mean
    return whitened


def explained_variance(
    values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor, *, reduce: Reduce = LOCAL
) -> torch.Tensor:
    """1 − Var(returns − values) / Var(returns) over masked positions; the critic's fit (1 = perfect).

    values, returns, mask: [B, T] → scalar, over the ranks of ``reduce``. Returns NaN-free 0 when the
    returns have no variance.
    """
    var_y = masked_var(returns, mask, reduce=reduce)
    var_diff = masked_var(returns - values, mask, reduce=reduce)
    return torch.where(var_y > EPS, 1.0 - var_diff / var_y.clamp_min(EPS), torch.zeros_like(var_y))
