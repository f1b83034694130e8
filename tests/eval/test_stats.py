"""The evaluation statistics against slow, obviously-correct references (brute-force enumeration of
subsets, of every bootstrap resample, of every sign pattern) and on simulated experiments: intervals
cover the true mean about 95% of the time, a known difference is found at the expected power, and
no difference gives p < 0.05 about 5% of the time (binomial tolerances, 3 standard deviations)."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest

from agentrl.eval.stats import bootstrap_ci, cluster_ci, pass_at_k, sign_flip_pvalue, task_means


def _band(p: float, n: int, sds: float = 3.0) -> tuple[float, float]:
    sd = math.sqrt(p * (1 - p) / n)
    return p - sds * sd, p + sds * sd


# ---- pass@k ---------------------------------------------------------------------------------------
def test_pass_at_k_hand_values():
    assert pass_at_k(5, 2, 2)[0] == pytest.approx(1 - 3 / 10)  # 1 − C(3,2)/C(5,2)
    assert pass_at_k(4, 0, 1)[0] == 0.0
    assert pass_at_k(4, 1, 1)[0] == pytest.approx(0.25)  # pass@1 is the pass rate
    assert pass_at_k(3, 1, 3)[0] == 1.0  # every sample drawn: the pass is among them


def test_pass_at_k_matches_subset_enumeration():
    """pass@k = the share of the C(n, k) k-subsets of the n samples holding at least one pass."""
    for n in range(1, 9):
        for c in range(n + 1):
            samples = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(range(n), k))
                ref = sum(any(samples[i] for i in s) for s in subsets) / len(subsets)
                assert pass_at_k(n, c, k)[0] == pytest.approx(ref, abs=1e-12), (n, c, k)


def test_pass_at_k_vectorised_and_refusals():
    got = pass_at_k(np.array([4, 4, 6]), np.array([0, 2, 6]), 2)
    assert got.tolist() == pytest.approx([0.0, 1 - 1 / 6, 1.0])
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)  # k > n
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)  # c > n


# ---- bootstrap intervals ----------------------------------------------------------------------------
def _exact_bootstrap_quantiles(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """Every one of the T^T equally likely resamples of T values, and the quantiles of their means."""
    means = [sum(r) / len(r) for r in itertools.product(values, repeat=len(values))]
    a = (1 - level) / 2
    lo, hi = np.quantile(means, [a, 1 - a])
    return float(lo), float(hi)


def test_bootstrap_ci_matches_the_exact_bootstrap_distribution():
    values = [0.05, 0.3, 0.35, 0.8, 1.0]
    lo, hi = bootstrap_ci(values, n_boot=200_000, seed=3)
    ref_lo, ref_hi = _exact_bootstrap_quantiles(values)
    assert lo == pytest.approx(ref_lo, abs=0.012) and hi == pytest.approx(ref_hi, abs=0.012)


def test_bootstrap_ci_is_seeded_and_deterministic():
    x = np.random.default_rng(0).random(40)
    assert bootstrap_ci(x, seed=5) == bootstrap_ci(x, seed=5)
    assert bootstrap_ci(x, seed=5) != bootstrap_ci(x, seed=6)
    assert bootstrap_ci([0.4]) == (0.4, 0.4)  # one task: no spread to see


def test_cluster_ci_resamples_tasks_not_episodes():
    """Four tasks whose samples agree within each task: the interval is that of the 4 task means
    (exact bootstrap over 4^4 resamples), not the √3-narrower one of 12 resampled episodes."""
    task_vals = {"a": 0.0, "b": 0.2, "c": 0.7, "d": 1.0}
    values = [v for v in task_vals.values() for _ in range(3)]
    tasks = [t for t in task_vals for _ in range(3)]
    mean, lo, hi = cluster_ci(values, tasks, n_boot=100_000, seed=1)
    ref_lo, ref_hi = _exact_bootstrap_quantiles(list(task_vals.values()))
    assert mean == pytest.approx(0.475)
    assert lo == pytest.approx(ref_lo, abs=0.02) and hi == pytest.approx(ref_hi, abs=0.02)


def test_task_means_weights_every_task_once():
    ids, means = task_means([1.0, 0.0, 0.0, 0.5], ["x", "y", "y", "y"])
    assert ids == ["x", "y"] and means.tolist() == pytest.approx([1.0, 1 / 6])


def test_cluster_intervals_cover_the_true_mean_about_95_percent():
    """200 simulated evaluations: 30 tasks, each with its own difficulty, 4 noisy samples each; the
    95% cluster-bootstrap interval holds the population mean (0.5) in ~95% of them (percentile
    intervals run slightly narrow with few tasks; resampling episodes would cover ~80%)."""
    rng = np.random.default_rng(7)
    runs, tasks, n = 200, 30, 4
    covered = 0
    labels = np.repeat(np.arange(tasks), n)
    for _ in range(runs):
        effect = rng.normal(0.5, 0.15, size=tasks)
        values = (np.repeat(effect, n) + rng.normal(0, 0.2, size=tasks * n)).tolist()
        _, lo, hi = cluster_ci(values, labels.tolist(), n_boot=2000, seed=int(rng.integers(1 << 30)))
        covered += lo <= 0.5 <= hi
    low, high = _band(0.95, runs)
    assert low - 0.02 <= covered / runs <= min(1.0, high), covered  # 0.02: the percentile method's slack


# ---- the paired sign-flip test -----------------------------------------------------------------------
def _slow_sign_flip(d: list[float]) -> float:
    obs = abs(sum(d) / len(d))
    hits = total = 0
    for signs in itertools.product((1, -1), repeat=len(d)):
        total += 1
        hits += abs(sum(s * x for s, x in zip(signs, d, strict=True)) / len(d)) >= obs - 1e-12
    return hits / total


@pytest.mark.parametrize("t", [1, 2, 5, 9, 12])
def test_sign_flip_exact_matches_brute_force(t):
    d = [random.Random(t).uniform(-0.3, 0.6) for _ in range(t)]
    p, exact = sign_flip_pvalue(d)
    assert exact and p == pytest.approx(_slow_sign_flip(d), abs=1e-12)


def test_sign_flip_hand_values():
    assert sign_flip_pvalue([0.5, 0.5, 0.5])[0] == pytest.approx(2 / 8)  # only all-+ and all-− as extreme
    assert sign_flip_pvalue([0.0, 0.0])[0] == 1.0
    assert sign_flip_pvalue([0.2, -0.2])[0] == 1.0


def test_sign_flip_monte_carlo_agrees_with_exact():
    d = np.random.default_rng(2).normal(0.15, 0.5, size=14)
    exact, _ = sign_flip_pvalue(d)
    mc, was_exact = sign_flip_pvalue(d, exact_max_tasks=0, n_perm=40_000, seed=9)
    assert not was_exact
    sd = math.sqrt(exact * (1 - exact) / 40_000)
    assert abs(mc - exact) <= 4 * sd + 1 / 40_000
    assert sign_flip_pvalue(d, exact_max_tasks=0, seed=1) == sign_flip_pvalue(d, exact_max_tasks=0, seed=1)


def test_monte_carlo_p_value_is_never_zero():
    """(1 + hits) / (1 + n_perm): with no random pattern as extreme as the data, p = 1/(n_perm + 1),
    the smallest p-value that n_perm patterns can support (0 would claim certainty)."""
    p, exact = sign_flip_pvalue(np.full(24, 0.3), n_perm=99, seed=0)
    assert not exact and p == pytest.approx(1 / 100)


def _paired_experiments(delta: float, runs: int, tasks: int, seed: int) -> tuple[float, float, float]:
    """(share with p < 0.05, share whose interval excludes 0, share whose interval lies above 0) over
    ``runs`` simulated paired experiments whose per-task B − A differences are N(delta, 1)."""
    rng = np.random.default_rng(seed)
    rejected = excluded = above = 0
    for _ in range(runs):
        d = rng.normal(delta, 1.0, size=tasks)
        p, _ = sign_flip_pvalue(d, n_perm=2000, seed=int(rng.integers(1 << 30)))
        lo, hi = bootstrap_ci(d, n_boot=2000, seed=int(rng.integers(1 << 30)))
        rejected += p < 0.05
        excluded += not lo <= 0 <= hi
        above += lo > 0
    return rejected / runs, excluded / runs, above / runs


def test_no_difference_is_found_about_5_percent_of_the_time():
    rejected, excluded, _ = _paired_experiments(0.0, runs=400, tasks=20, seed=11)
    low, high = _band(0.05, 400)
    assert low <= rejected <= high, rejected
    assert low <= excluded <= high + 0.02, excluded  # percentile intervals run slightly narrow


def test_a_known_difference_is_found_at_the_expected_power():
    """δ = 0.75 standard deviations over 20 tasks: a two-sided test at 5% has power ≈ 0.92 (normal
    approximation Φ(δ√T − 1.96)); the permutation test and the interval find it about as often."""
    power = 0.5 * (1 + math.erf((0.75 * math.sqrt(20) - 1.96) / math.sqrt(2)))
    rejected, excluded, above = _paired_experiments(0.75, runs=200, tasks=20, seed=12)
    low, _ = _band(power, 200)
    assert rejected >= low - 0.03, (rejected, power)
    assert above >= low - 0.03 and above == excluded, (above, excluded)  # found in B's favour
