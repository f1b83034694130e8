"""Every statistic of a scorecard and a comparison against a slow reference written here: loops over
tasks and samples, every sign pattern enumerated, Holm's adjustment by its definition, the bootstrap
as one resample at a time. The data are chosen so that the wrong unit or the wrong p-value gives
another answer: tasks whose samples agree (so resampling episodes would narrow the interval),
criteria whose unadjusted p is below alpha and Holm's above, ids that carry no ``#N``."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from agentrl.eval import scorecard
from agentrl.eval.compare import compare
from tests.eval.fixtures import traj


def slow_bootstrap(
    per_task: list[float], *, n_boot: int, seed: int, level: float = 0.95
) -> tuple[float, float]:
    """The percentile bootstrap of the mean over tasks, one resample of the tasks at a time."""
    rng = np.random.default_rng(seed)
    means = []
    for _ in range(n_boot):
        picks = rng.integers(0, len(per_task), size=len(per_task))
        means.append(sum(per_task[i] for i in picks) / len(per_task))
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def slow_sign_flip(diffs: list[float]) -> float:
    """The two-sided exact sign-flip p-value: the share of sign patterns whose |mean| is at least
    the observed one."""
    obs = abs(sum(diffs)) / len(diffs)
    pats = list(itertools.product((1, -1), repeat=len(diffs)))
    hits = sum(
        abs(sum(s * d for s, d in zip(p, diffs, strict=True))) / len(diffs) >= obs - 1e-12 for p in pats
    )
    return hits / len(pats)


def slow_holm(ps: list[float]) -> list[float]:
    """Holm's adjusted p of each test: the largest min(1, (m − j) p_(j)) over the tests ranked at or
    before it (0-based rank j, ascending p)."""
    m = len(ps)
    ranked = sorted(ps)
    return [max(min(1.0, (m - j) * ranked[j]) for j in range(ranked.index(p) + ps.count(p))) for p in ps]


# ---- pass@1 ------------------------------------------------------------------------------------
def test_the_pass_at_1_interval_resamples_tasks_not_episodes():
    """Six tasks of 8, 1, 5, 8, 2 and 6 samples; within a task the samples mostly agree. pass@1 of a
    task is its share of passing samples; the interval is the bootstrap of those six shares."""
    rng = random.Random(4)
    passes = {"a": [1] * 8, "b": [0], "c": [1, 1, 1, 0, 1], "d": [0] * 8, "e": [1, 0], "f": [0] * 5 + [1]}
    episodes = [
        traj(task, s, 1.0 if ok else rng.choice([0.0, 0.4, 0.8]))
        for task, flags in passes.items()
        for s, ok in enumerate(flags)
    ]
    rng.shuffle(episodes)
    card = scorecard(episodes, kinds={}, n_boot=3000, seed=11)
    per_task = [sum(v) / len(v) for _, v in sorted(passes.items())]
    assert card.pass_at_1 is not None and card.pass_at_1.mean == pytest.approx(sum(per_task) / 6)
    assert (card.pass_at_1.low, card.pass_at_1.high) == pytest.approx(
        slow_bootstrap(per_task, n_boot=3000, seed=11)
    )
    assert card.pass_at_k["1"] == pytest.approx(card.pass_at_1.mean)
    # resampling the 30 episodes would give another (narrower) interval around another mean
    flat = [x for _, v in sorted(passes.items()) for x in v]
    lo, hi = slow_bootstrap(flat, n_boot=3000, seed=11)
    assert hi - lo < card.pass_at_1.high - card.pass_at_1.low - 0.1


# ---- Holm-adjusted "moved" ---------------------------------------------------------------------
def _criteria_pair(tasks: int, moves: dict[str, list[float]]):  # type: ignore[no-untyped-def]
    """A and B on ``tasks`` tasks, one sample each; criterion c is met in A, and in B met (+1),
    unmet (-1) or unchanged (0) per task as ``moves[c]`` says (unmet in A where it moves up)."""
    a, b = [], []
    for t in range(tasks):
        ca = {c: 0.0 if m[t] > 0 else 1.0 for c, m in moves.items()}
        cb = {c: 1.0 if m[t] > 0 else (0.0 if m[t] < 0 else ca[c]) for c, m in moves.items()}
        a.append(traj(f"t{t}", 0, 0.5, criteria=ca))
        b.append(traj(f"t{t}", 0, 0.5, criteria=cb))
    return a, b


@pytest.mark.parametrize(
    ("tasks", "moves", "moved"),
    [
        # two criteria that each rose on all six tasks: p = 2/64 each, below 0.05; Holm: 0.0625 each
        (6, {"x": [1] * 6, "y": [1] * 6, "z": [0] * 6}, set()),
        # on eight tasks: x rose everywhere (p 2/256, Holm 8/256: moved), y and w on six and stayed on
        # two (p 8/256 each, Holm 24/256: not moved), z stayed
        (8, {"x": [1] * 8, "y": [1] * 6 + [0, 0], "w": [0, 0] + [1] * 6, "z": [0] * 8}, {"x"}),
    ],
)
def test_a_criterion_moved_when_its_holm_adjusted_p_is_below_alpha(tasks, moves, moved):
    a, b = _criteria_pair(tasks, moves)
    c = compare(a, b, n_boot=200, alpha=0.05)
    got = {s.id: s for s in c.criteria}
    ids = sorted(moves)
    ps = [slow_sign_flip([float(x) for x in moves[i]]) for i in ids]
    holm = dict(zip(ids, slow_holm(ps), strict=True))
    for i, p in zip(ids, ps, strict=True):
        assert got[i].p_value == pytest.approx(p) and got[i].p_holm == pytest.approx(holm[i]), i
    assert {i for i in ids if holm[i] < 0.05} == moved == {s.id for s in c.criteria if s.moved}
    # Holm changes the decision here: unadjusted, more criteria would have moved
    assert {i for i, p in zip(ids, ps, strict=True) if p < 0.05} > moved


# ---- pairing by (task, sample) -----------------------------------------------------------------
def test_episodes_pair_by_task_and_sample_whatever_their_ids_say():
    """Ids without ``#N`` (and B's in another order, with a ``#N`` that is not the sample): the pairs
    are (task, info.sample)."""
    rng = random.Random(6)
    a, b, truth = [], [], {}
    for t in range(5):
        for s in range(3):
            x, y = rng.random(), rng.random()
            truth[(f"t{t}", s)] = y - x
            ta = traj(f"t{t}", s, x)
            ta.id = f"run-a/episode-{t * 3 + s}"
            tb = traj(f"t{t}", s, y)
            tb.id = f"t{t}#{(s + 1) % 3}"  # a suffix that is not the sample: info.sample wins
            a.append(ta)
            b.append(tb)
    rng.shuffle(b)
    c = compare(a, b, n_boot=1000, seed=2)
    per_task = [np.mean([truth[(f"t{t}", s)] for s in range(3)]) for t in range(5)]
    assert c.pairs == 15 and c.tasks == 5 and c.unpaired_a == c.unpaired_b == 0
    assert c.difference.mean == pytest.approx(np.mean(per_task))
    assert (c.difference.low, c.difference.high) == pytest.approx(
        slow_bootstrap(per_task, n_boot=1000, seed=2)
    )
    assert c.p_value == pytest.approx(slow_sign_flip(per_task))
