"""The paired comparison: pairs by (task, sample) whatever the order, B − A (never A − B), its interval
and p-value against a slow recomputation, the criteria that moved, and the refusals."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from agentrl.errors import ConfigError
from agentrl.eval.compare import compare, comparison_table, holm, pair_key
from agentrl.eval.stats import bootstrap_ci
from tests.eval.fixtures import traj


def _slow(a, b):
    """Per-task mean of B − A over pairs, by loops, in task-id order; the exact sign-flip p-value by
    enumeration."""
    by_key_a = {(t.task_id, t.info["sample"]): t.reward.normalized for t in a}
    diffs: dict[str, list[float]] = {}
    for t in b:
        key = (t.task_id, t.info["sample"])
        if key in by_key_a:
            diffs.setdefault(t.task_id, []).append(t.reward.normalized - by_key_a[key])
    d = [sum(v) / len(v) for _, v in sorted(diffs.items())]
    obs = abs(sum(d) / len(d))
    pats = list(itertools.product((1, -1), repeat=len(d)))
    p = sum(abs(sum(s * x for s, x in zip(signs, d, strict=True)) / len(d)) >= obs - 1e-12 for signs in pats)
    return d, p / len(pats)


def _pair(tasks=8, n=3, shift=0.2, seed=0):
    rng = random.Random(seed)
    a, b = [], []
    for t in range(tasks):
        base = rng.random() * 0.6  # tasks differ a lot; B is A plus a small consistent gain
        for s in range(n):
            x = min(1.0, base + rng.random() * 0.2)
            a.append(traj(f"t{t}", s, x, criteria={"acc": float(x > 0.4), "neg-rumor": 0.0}))
            y = min(1.0, x + shift + rng.uniform(-0.05, 0.05))
            b.append(traj(f"t{t}", s, y, criteria={"acc": 1.0, "neg-rumor": 0.0}))
    return a, b


def test_difference_interval_and_p_value_match_a_slow_recomputation():
    a, b = _pair()
    random.Random(1).shuffle(b)  # pairing is by (task, sample), not by position, and the draws
    random.Random(2).shuffle(a)  # do not depend on the order of the files
    c = compare(a, b, n_boot=4000, seed=3)
    d, p = _slow(a, b)
    assert c.pairs == 24 and c.tasks == 8 and c.unpaired_a == c.unpaired_b == 0
    assert c.difference.mean == pytest.approx(np.mean(d))
    assert (c.difference.low, c.difference.high) == pytest.approx(bootstrap_ci(d, n_boot=4000, seed=3))
    assert c.exact and c.p_value == pytest.approx(p)
    assert c.b_mean - c.a_mean == pytest.approx(c.difference.mean)


def test_the_difference_is_b_minus_a():
    a, b = _pair(shift=0.2)
    forward, backward = compare(a, b, n_boot=500), compare(b, a, n_boot=500)
    assert forward.difference.mean > 0.15 and forward.difference.low > 0
    assert backward.difference.mean == pytest.approx(-forward.difference.mean)
    assert forward.p_value == backward.p_value == pytest.approx(2 / 2**8)  # every task agrees: the extremes


def test_pairing_beats_the_task_spread():
    """A consistent +0.02 on tasks that differ by up to 0.6: paired, every task moved the same way."""
    a, b = _pair(tasks=12, shift=0.02, seed=5)
    c = compare(a, b, n_boot=500)
    assert c.difference.low > 0 and c.p_value < 0.01


def test_criteria_that_moved_with_holm():
    a, b = _pair(tasks=10, seed=2)
    c = compare(a, b, n_boot=500)
    moved = {s.id: s for s in c.criteria}
    assert moved["acc"].moved and moved["acc"].b_rate == 1.0 and moved["acc"].difference > 0
    assert not moved["neg-rumor"].moved and moved["neg-rumor"].difference == 0.0
    assert moved["neg-rumor"].a_rate == 1.0  # a negative criterion's rate: free of the flaw
    assert c.criteria[0].id == "acc"  # the largest move first
    text = comparison_table(c)
    assert "* acc (positive)" in text and "criteria that moved    1 of 2" in text


def test_holm_hand_values():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5]) == [0.5]
    assert holm([0.2, 0.9, 0.01, 0.02]) == pytest.approx([0.4, 0.9, 0.04, 0.06])


def test_unpaired_judge_errors_and_seed_mismatches_are_counted():
    a = [traj("t", 0, 0.2), traj("t", 1, 0.4), traj("u", 0, 0.1), traj("v", 0, 0.3)]
    b = [traj("t", 0, 0.5), traj("t", 1, None, judge_error=True), traj("u", 0, 0.6, seed=999)]
    c = compare(a, b, n_boot=200)
    assert c.pairs == 2 and c.unpaired_a == 2 and c.unpaired_b == 0 and c.seed_mismatches == 1
    assert c.difference.mean == pytest.approx(np.mean([0.3, 0.5]))


def test_refusals():
    with pytest.raises(ConfigError, match="share no scored"):
        compare([traj("t", 0, 0.2)], [traj("u", 0, 0.2)])
    with pytest.raises(ConfigError, match="appears twice"):
        compare([traj("t", 0, 0.2), traj("t", 0, 0.3)], [traj("t", 0, 0.2)], a_name="A.jsonl")


def test_pair_key_reads_the_sample_from_info_or_the_id():
    t = traj("task-1", 3, 0.5)
    assert pair_key(t) == ("task-1", 3)
    t.info.pop("sample")
    assert pair_key(t) == ("task-1", 3)
    t.id = "plain"
    assert pair_key(t) == ("task-1", 0)
