"""The statistics of an evaluation, numpy only: intervals over tasks, unbiased pass@k, paired tests.

The unit of resampling is the task, never the episode: samples of one task share its difficulty, so
they are not independent draws, and resampling episodes would make intervals too narrow by up to
√n (Agarwal et al. 2021 resample runs and tasks for the same reason). Every function is seeded and
deterministic: the same inputs and ``seed`` give the same numbers.

- ``task_means``: each task's mean over its samples.
- ``bootstrap_ci``: percentile bootstrap interval of the mean of per-task values, resampling tasks
  with replacement (a cluster bootstrap when the values are per-task means).
- ``pass_at_k``: 1 − C(n−c, k)/C(n, k) (Chen et al. 2021), the chance that k of a task's n samples,
  drawn without replacement, hold at least one pass.
- ``sign_flip_pvalue``: the two-sided paired permutation test over tasks: under "A and B are the
  same policy", each task's difference is as likely negated, so the observed |mean| is ranked
  among the |means| of every sign pattern (exactly for up to ``EXACT_MAX_TASKS`` tasks, else by
  seeded Monte Carlo, with the +1 correction that keeps the p-value valid).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

__all__ = [
    "EXACT_MAX_TASKS",
    "N_BOOT",
    "N_PERM",
    "bootstrap_ci",
    "cluster_ci",
    "pass_at_k",
    "sign_flip_pvalue",
    "task_means",
]

#: Bootstrap resamples of an interval, and sign patterns of a Monte Carlo permutation test.
N_BOOT = 10_000
N_PERM = 20_000
#: Up to this many tasks the permutation test enumerates all 2^T sign patterns.
EXACT_MAX_TASKS = 16


def task_means(values: Sequence[float], tasks: Sequence[Hashable]) -> tuple[list[Hashable], np.ndarray]:
    """Each task's mean over its values: (task ids in first-seen order, float64 [T] means)."""
    if len(values) != len(tasks):
        raise ValueError("one task per value")
    order: dict[Hashable, list[float]] = {}
    for v, t in zip(values, tasks, strict=True):
        order.setdefault(t, []).append(float(v))
    return list(order), np.array([np.mean(v) for v in order.values()], dtype=np.float64)


def bootstrap_ci(
    per_task: Sequence[float] | np.ndarray, *, level: float = 0.95, n_boot: int = N_BOOT, seed: int = 0
) -> tuple[float, float]:
    """The percentile bootstrap interval of ``mean(per_task)``: ``n_boot`` resamples of the T tasks
    with replacement, and the (1 − level)/2 and (1 + level)/2 quantiles of their means. ``per_task``:
    float [T], T ≥ 1 (one task gives the point itself: no spread can be seen)."""
    x = np.asarray(per_task, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError("bootstrap_ci needs a 1-D array of at least one per-task value")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    rng = np.random.default_rng(seed)
    means = np.empty(n_boot)
    chunk = max(1, 2_000_000 // x.size)  # bound the [chunk, T] index matrix
    for a in range(0, n_boot, chunk):
        b = min(n_boot, a + chunk)
        means[a:b] = x[rng.integers(0, x.size, size=(b - a, x.size))].mean(axis=1)
    alpha = (1.0 - level) / 2
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def cluster_ci(
    values: Sequence[float],
    tasks: Sequence[Hashable],
    *,
    level: float = 0.95,
    n_boot: int = N_BOOT,
    seed: int = 0,
) -> tuple[float, float, float]:
    """(mean, low, high) of the mean over tasks of each task's mean of ``values`` (float [E], one per
    episode, ``tasks`` [E] its task): the cluster bootstrap, resampling whole tasks."""
    _, means = task_means(values, tasks)
    low, high = bootstrap_ci(means, level=level, n_boot=n_boot, seed=seed)
    return float(means.mean()), low, high


def pass_at_k(n: int | np.ndarray, c: int | np.ndarray, k: int) -> np.ndarray:
    """Unbiased pass@k of tasks with ``n`` samples of which ``c`` pass: 1 − C(n−c, k)/C(n, k),
    computed as 1 − ∏_{i=n−c+1}^{n} (1 − k/i) (no huge binomials); 1 when n − c < k. ``n`` and ``c``:
    int [T] (or scalars), k ≤ min(n). Returns float64 [T]."""
    n_arr, c_arr = np.atleast_1d(np.asarray(n, dtype=np.int64)), np.atleast_1d(np.asarray(c, dtype=np.int64))
    if k < 1 or np.any(n_arr < k) or np.any(c_arr < 0) or np.any(c_arr > n_arr):
        raise ValueError(f"pass@{k} needs 1 ≤ k ≤ n and 0 ≤ c ≤ n for every task")
    out = np.empty(n_arr.shape, dtype=np.float64)
    for j, (nj, cj) in enumerate(zip(n_arr.tolist(), c_arr.tolist(), strict=True)):
        if nj - cj < k:
            out[j] = 1.0
        else:
            i = np.arange(nj - cj + 1, nj + 1, dtype=np.float64)
            out[j] = 1.0 - float(np.prod(1.0 - k / i))
    return out


def _sign_patterns(t: int) -> np.ndarray:
    """Every ±1 pattern of length t: int8 [2^t, t] (row r's bit j set → task j negated)."""
    bits = (np.arange(2**t, dtype=np.int64)[:, None] >> np.arange(t, dtype=np.int64)) & 1
    return (1 - 2 * bits).astype(np.int8)


def sign_flip_pvalue(
    diffs: Sequence[float] | np.ndarray,
    *,
    n_perm: int = N_PERM,
    seed: int = 0,
    exact_max_tasks: int = EXACT_MAX_TASKS,
) -> tuple[float, bool]:
    """The two-sided paired sign-flip p-value of ``mean(diffs) = 0``; ``diffs``: float [T], one
    (B − A) difference per task. Returns (p, exact): exact enumeration of the 2^T sign patterns
    when T ≤ ``exact_max_tasks`` (p = share of patterns whose |mean| ≥ the observed one), else
    ``n_perm`` seeded random patterns with p = (1 + hits) / (1 + n_perm)."""
    d = np.asarray(diffs, dtype=np.float64)
    if d.ndim != 1 or d.size == 0:
        raise ValueError("sign_flip_pvalue needs a 1-D array of at least one per-task difference")
    observed = abs(d.mean())
    tol = 1e-12 * max(1.0, float(np.abs(d).max()))  # ties in floating point count as ties
    if d.size <= exact_max_tasks:
        stats = np.abs(_sign_patterns(d.size) @ d) / d.size
        return float(np.mean(stats >= observed - tol)), True
    rng = np.random.default_rng(seed)
    hits = 0
    chunk = max(1, 2_000_000 // d.size)
    for a in range(0, n_perm, chunk):
        b = min(n_perm, a + chunk)
        signs = rng.integers(0, 2, size=(b - a, d.size), dtype=np.int8) * 2 - 1
        hits += int(np.sum(np.abs(signs @ d) / d.size >= observed - tol))
    return (1 + hits) / (1 + n_perm), False
