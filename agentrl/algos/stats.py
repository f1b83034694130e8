"""Masked batch statistics: the mean, variance and whitening that every estimator shares.

Statistics are taken over the positions where ``mask`` is 1 across the whole batch (not per row),
as in verl. ``eps = 1e-8`` guards the divisions.
"""

from __future__ import annotations

import torch

__all__ = ["EPS", "explained_variance", "masked_mean", "masked_sum", "masked_var", "masked_whiten"]

EPS = 1e-8


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``x`` where ``mask`` is 1. Masked entries are excluded even when they are inf or NaN.

    x, mask: same shape (e.g. [B, T]); returns a scalar, or the shape without ``dim``.
    """
    xm = torch.where(mask.bool(), x, torch.zeros((), dtype=x.dtype, device=x.device))
    return xm.sum() if dim is None else xm.sum(dim=dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` over positions where ``mask`` is 1: Σ x·m / (Σ m + 1e-8).

    x, mask: [B, T] (any equal shapes); ``dim=None`` gives the batch-wide scalar, ``dim=-1`` a
    per-row mean of shape [B]. An all-zero mask gives 0, not NaN.
    """
    m = mask.to(x.dtype)
    denom = m.sum() if dim is None else m.sum(dim=dim)
    return masked_sum(x, mask, dim) / (denom + EPS)


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Batch-wide variance of ``x`` over masked positions (scalar).

    ``unbiased`` applies Bessel's correction n/(n-1). verl raises when n ≤ 1; here the correction
    is skipped for n ≤ 1 instead (the variance of one element is 0), so a batch with a single policy
    token whitens to 0 rather than crashing a training run.
    """
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    if unbiased:
        n = mask.to(x.dtype).sum()
        var = torch.where(n > 1, var * n / (n - 1).clamp_min(1), var)
    return var


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """(x − mean) / sqrt(var + 1e-8) with mean and unbiased var over masked positions.

    Applied elementwise to every position (as verl does); multiply by ``mask`` for zeros elsewhere.
    ``shift_mean=False`` adds the mean back (scale only). x, mask: [B, T] → [B, T].
    """
    mean = masked_mean(x, mask)
    var = masked_var(x, mask)
    whitened = (x - mean) * torch.rsqrt(var + EPS)
    if not shift_mean:
        whitened = whitened + mean
    return whitened


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """1 − Var(returns − values) / Var(returns) over masked positions; the critic's fit (1 = perfect).

    values, returns, mask: [B, T] → scalar. Returns NaN-free 0 when the returns have no variance.
    """
    var_y = masked_var(returns, mask)
    var_diff = masked_var(returns - values, mask)
    return torch.where(var_y > EPS, 1.0 - var_diff / var_y.clamp_min(EPS), torch.zeros_like(var_y))
