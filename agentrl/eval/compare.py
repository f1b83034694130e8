"""A paired comparison of two sets of judged trajectories: is B better than A, and by how much?

Episodes pair by (task, sample): ``agentrl rollout`` and evaluation during training seed an
episode by ``episode_seed(seed, task, sample)``, the same for any policy, so A's and B's sample s
of a task met the same env seed (a pair whose recorded seeds differ still pairs, and is counted).
Only pairs that both sides scored count. Per task, d = the mean over its pairs of B − A
(normalised reward); the difference is the mean of d over tasks, with

- a 95% percentile bootstrap interval resampling tasks (``agentrl.eval.stats.bootstrap_ci``);
- a two-sided paired sign-flip permutation p-value over tasks (``sign_flip_pvalue``: exact up to
  16 tasks, seeded Monte Carlo beyond).

Criteria: the same per-task paired difference of each criterion's met share (a negative
criterion's "met" is "free of the flaw"), with its p-value and Holm's step-down adjustment over the
criteria compared; a criterion *moved* when its adjusted p-value is below ``alpha``.

Each side holds one episode per (task, sample) (``agentrl.eval.episodes.one_per_episode``, the rule
``agentrl eval`` applies too). Pairs are made by task id, which names the same task only within one
suite: when the two sides were rolled out on different suites (``info.suite``), the comparison warns
(an ``AgentRLWarning``, a ``note:`` line in the CLI) and records both (``a_suites``, ``b_suites``).
It is not refused, since a suite's recorded path changes when the suite is moved or copied. Rewards
were checked when they were read (``RewardBreakdown``: finite, normalised on [0, 1]), and a
``Comparison`` holds only finite numbers, so no p-value is ever printed beside a NaN difference.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from agentrl.errors import AgentRLWarning, ConfigError
from agentrl.eval.episodes import EpisodeKey, one_per_episode, pair_key, suites
from agentrl.eval.scorecard import Interval
from agentrl.eval.stats import N_BOOT, N_PERM, bootstrap_ci, sign_flip_pvalue
from agentrl.judge import normalized_reward
from agentrl.trajectory import Trajectory

__all__ = ["Comparison", "CriterionShift", "compare", "comparison_table", "holm", "pair_key"]


class CriterionShift(BaseModel):
    """One criterion's met share in A and B over the pairs, and the paired test of its change."""

    model_config = ConfigDict(allow_inf_nan=False)
    id: str
    kind: str
    a_rate: float
    b_rate: float
    difference: float
    p_value: float
    p_holm: float
    moved: bool


class Comparison(BaseModel):
    """What ``agentrl eval compare A B`` prints (``--json`` writes this model); its numbers are finite."""

    model_config = ConfigDict(allow_inf_nan=False)

    a: str
    b: str
    a_suites: list[str] = []
    """The suites each side was rolled out on (``info.suite``); a warning when they differ."""
    b_suites: list[str] = []
    pairs: int
    tasks: int
    unpaired_a: int
    """Scored episodes of A without a scored partner in B (and the reverse for ``unpaired_b``)."""
    unpaired_b: int
    seed_mismatches: int
    """Pairs whose recorded episode seeds differ (they still pair by task and sample)."""
    a_mean: float
    b_mean: float
    difference: Interval
    """Mean over tasks of B − A, with its bootstrap interval over tasks."""
    p_value: float
    exact: bool
    """Whether the p-value enumerated every sign pattern (else seeded Monte Carlo)."""
    criteria: list[CriterionShift]
    alpha: float
    n_boot: int
    n_perm: int
    seed: int


def _scored(trajs: Sequence[Trajectory], name: str) -> dict[EpisodeKey, Trajectory]:
    episodes = one_per_episode([(name, trajs)])
    return {k: t for k, t in episodes.items() if t.reward is not None and t.reward.total is not None}


def _met(t: Trajectory) -> dict[str, tuple[str, float]]:
    assert t.reward is not None
    return {c.id: (c.kind, 1.0 - c.score if c.kind == "negative" else c.score) for c in t.reward.criteria}


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error over the tests), in the input order."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    out, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        out[i] = running
    return out


def _per_task(pairs: dict[str, list[float]]) -> np.ndarray:
    return np.array([np.mean(v) for v in pairs.values()], dtype=np.float64)


def compare(
    a: Sequence[Trajectory],
    b: Sequence[Trajectory],
    *,
    a_name: str = "A",
    b_name: str = "B",
    level: float = 0.95,
    alpha: float = 0.05,
    n_boot: int = N_BOOT,
    n_perm: int = N_PERM,
    seed: int = 0,
) -> Comparison:
    """The paired comparison B − A (see the module docstring). ``ConfigError`` when the two share
    no scored (task, sample) pair, or one side holds a (task, sample) twice."""
    sa, sb = _scored(a, a_name), _scored(b, b_name)
    a_suites, b_suites = suites(a), suites(b)
    if a_suites and b_suites and a_suites != b_suites:
        warnings.warn(
            f"{a_name} was rolled out on suite {', '.join(a_suites)} and {b_name} on {', '.join(b_suites)}: "
            "episodes pair by task id, which names the same task only within one suite",
            AgentRLWarning,
            stacklevel=2,
        )
    keys = sorted(k for k in sa if k in sb)  # task order, so the draws never depend on file order
    if not keys:
        raise ConfigError(
            f"{a_name} and {b_name} share no scored (task, sample) pair: were both rolled out on the "
            "same suite and split, and judged?"
        )
    diffs: dict[str, list[float]] = defaultdict(list)
    a_vals: dict[str, list[float]] = defaultdict(list)
    b_vals: dict[str, list[float]] = defaultdict(list)
    crit: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    crit_a: dict[str, list[float]] = defaultdict(list)
    crit_b: dict[str, list[float]] = defaultdict(list)
    kinds: dict[str, str] = {}
    mismatches = 0
    for key in keys:
        ta, tb = sa[key], sb[key]
        ra, rb = normalized_reward(ta), normalized_reward(tb)
        task = key[0]
        diffs[task].append(rb - ra)
        a_vals[task].append(ra)
        b_vals[task].append(rb)
        seed_a, seed_b = ta.info.get("seed"), tb.info.get("seed")
        mismatches += seed_a is not None and seed_b is not None and seed_a != seed_b
        ma, mb = _met(ta), _met(tb)
        for cid in ma.keys() & mb.keys():
            kinds.setdefault(cid, ma[cid][0])
            crit[cid][task].append(mb[cid][1] - ma[cid][1])
            crit_a[cid].append(ma[cid][1])
            crit_b[cid].append(mb[cid][1])
    d = _per_task(diffs)
    if not np.isfinite(d).all():  # read rewards are finite; one built in memory may not be
        raise ConfigError(f"{a_name}, {b_name}: a reward that is not a finite number cannot be compared")
    low, high = bootstrap_ci(d, level=level, n_boot=n_boot, seed=seed)
    p, exact = sign_flip_pvalue(d, n_perm=n_perm, seed=seed)
    ids = list(crit)
    per_crit = [_per_task(crit[c]) for c in ids]
    ps = [sign_flip_pvalue(x, n_perm=n_perm, seed=seed)[0] for x in per_crit]
    adjusted = holm(ps)
    shifts = [
        CriterionShift(
            id=c,
            kind=kinds[c],
            a_rate=float(np.mean(crit_a[c])),
            b_rate=float(np.mean(crit_b[c])),
            difference=float(x.mean()),
            p_value=pc,
            p_holm=ph,
            moved=ph < alpha,
        )
        for c, x, pc, ph in zip(ids, per_crit, ps, adjusted, strict=True)
    ]
    shifts.sort(key=lambda s: (-abs(s.difference), s.id))
    return Comparison(
        a=a_name,
        b=b_name,
        a_suites=a_suites,
        b_suites=b_suites,
        pairs=len(keys),
        tasks=len(diffs),
        unpaired_a=len(sa) - len(keys),
        unpaired_b=len(sb) - len(keys),
        seed_mismatches=int(mismatches),
        a_mean=float(_per_task(a_vals).mean()),
        b_mean=float(_per_task(b_vals).mean()),
        difference=Interval(mean=float(d.mean()), low=low, high=high, level=level),
        p_value=p,
        exact=exact,
        criteria=shifts,
        alpha=alpha,
        n_boot=n_boot,
        n_perm=n_perm,
        seed=seed,
    )


def comparison_table(c: Comparison) -> str:
    """The comparison as plain-text lines (what ``agentrl eval compare`` prints)."""
    how = "exact, every sign pattern" if c.exact else f"Monte Carlo, {c.n_perm} sign patterns"
    lines = [
        f"A: {c.a}",
        f"B: {c.b}",
        f"  pairs (task, sample)   {c.pairs} over {c.tasks} tasks"
        + (f"; unpaired: {c.unpaired_a} in A, {c.unpaired_b} in B" if c.unpaired_a or c.unpaired_b else "")
        + (f"; {c.seed_mismatches} pairs with different seeds" if c.seed_mismatches else ""),
        f"  mean normalised reward A {c.a_mean:.3f} · B {c.b_mean:.3f}",
        f"  B − A                  {c.difference.mean:+.3f}  [{c.difference.low:+.3f}, {c.difference.high:+.3f}] "
        f"({c.difference.level:.0%} CI over tasks)",
        f"  p-value                {c.p_value:.4g} (paired sign-flip test over tasks, two-sided; {how})",
    ]
    moved = [s for s in c.criteria if s.moved]
    lines.append(
        f"  criteria that moved    {len(moved)} of {len(c.criteria)} (Holm-adjusted p < {c.alpha:g})"
    )
    for s in c.criteria:
        mark = "*" if s.moved else " "
        lines.append(
            f"  {mark} {s.id} ({s.kind}): {s.a_rate:.1%} → {s.b_rate:.1%} ({s.difference:+.1%}, "
            f"p {s.p_value:.3g}, Holm {s.p_holm:.3g})"
        )
    return "\n".join(lines)
