"""Shards of a batch on N ranks, each computed with the injected reduction, give what one process gives
on the whole batch: whitening, GRPO, RLOO, REINFORCE++, the batch KL and mini-batch membership.
Ranks are simulated (threads sharing a reduction, ``tests.simulated_ranks``); the real 2-process
gloo run of the update step is in ``tests/train/test_rank_equality.py``."""

import itertools
import math
import random

import pytest
import torch

from agentrl.algos import (
    LOCAL,
    AdaptiveKLController,
    apply_kl_penalty,
    explained_variance,
    grpo_advantages,
    masked_mean,
    masked_var,
    masked_whiten,
    mini_batch_rows,
    reinforce_pp_advantages,
    rloo_advantages,
)
from tests.algos.test_reference_cases import ADVANTAGES, WHITENED
from tests.reference_algos import group_stats_python, reward_to_go_python
from tests.simulated_ranks import on_ranks

# The user's report: trajectories of 7 policy tokens with outcome rewards 1, 0, 2.5, 0.5.
REWARDS = [1.0, 0.0, 2.5, 0.5]
ONE_PROCESS = [0.0, -1.05, 1.57, -0.52]
LOCAL_HALVES = [0.96, -0.96, 0.96, -0.96]  # what each of 2 ranks gets from its own statistics


def _rows(rewards, seed=0, policy_tokens=7):
    """[B, T] rewards and mask: a masked prompt of random length, `policy_tokens` policy tokens with a
    masked observation hole in some rows, the outcome reward on the last policy token, padding."""
    rng = random.Random(seed)
    layout = []
    for _ in rewards:
        m = [0] * rng.randint(1, 4) + [1] * 3
        if rng.random() < 0.5:
            m += [0] * rng.randint(1, 3)  # a tool observation
        layout.append(m + [1] * (policy_tokens - 3))
    T = max(len(m) for m in layout) + 2
    mask = [m + [0] * (T - len(m)) for m in layout]
    r = [[0.0] * T for _ in rewards]
    for i, m in enumerate(mask):
        r[i][max(t for t, on in enumerate(m) if on)] = rewards[i]
    return r, mask


def _shards(x, sizes):
    """Consecutive blocks of `sizes` rows (rank 0's first), as the trainer lays rows out on ranks."""
    out, start = [], 0
    for n in sizes:
        out.append(x[start : start + n])
        start += n
    return out


def _trimmed(rewards, mask):
    """A shard cut to its own last used column: each rank's collated batch has its own padding."""
    width = int(mask.any(0).nonzero().max()) + 1
    return rewards[:, :width], mask[:, :width]


def _policy_values(adv, mask):
    """Each row's advantages on its policy tokens, as lists."""
    return [adv[i][mask[i].bool()].tolist() for i in range(len(adv))]


def _reinforce_pp_python(rewards, mask, gamma):
    """REINFORCE++ by hand: rewards-to-go on policy tokens, whitened with the mean and the unbiased
    variance of every policy token of the batch."""
    g = reward_to_go_python(rewards, mask, gamma)
    tokens = [g[b][t] for b in range(len(g)) for t in range(len(g[b])) if mask[b][t]]
    mean = sum(tokens) / len(tokens)
    var = sum((x - mean) ** 2 for x in tokens) / (len(tokens) - 1)
    return [
        [(g[b][t] - mean) / math.sqrt(var + 1e-8) if mask[b][t] else 0.0 for t in range(len(g[b]))]
        for b in range(len(g))
    ]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_reinforce_pp_two_ranks_equal_one_process(dtype):
    r, m = _rows(REWARDS)
    rewards, mask = torch.tensor(r, dtype=dtype), torch.tensor(m)
    one = reinforce_pp_advantages(rewards, mask, 1.0)
    by_hand = _reinforce_pp_python(r, m, 1.0)
    assert one.tolist() == [pytest.approx(row, abs=1e-6) for row in by_hand]
    # γ = 1 and one outcome reward: every policy token of a row shares its advantage.
    assert [row[0] for row in _policy_values(one, mask)] == pytest.approx(ONE_PROCESS, abs=0.005)

    def rank_part(shard, reduce):
        rw, mk = shard
        return reinforce_pp_advantages(rw, mk, 1.0, reduce=reduce)

    shards = [_trimmed(a, b) for a, b in zip(_shards(rewards, [2, 2]), _shards(mask, [2, 2]), strict=True)]
    assert shards[0][0].shape[1] != shards[1][0].shape[1]
    two = [
        v
        for (_, mk), adv in zip(shards, on_ranks(rank_part, shards), strict=True)
        for v in _policy_values(adv, mk)
    ]
    for got, want in zip(two, _policy_values(one, mask), strict=True):
        assert got == pytest.approx(want, abs=1e-6)
    # The defect this guards: each rank whitening with its own statistics.
    alone = [v for s in shards for v in _policy_values(rank_part(s, LOCAL), s[1])]
    assert [row[0] for row in alone] == pytest.approx(LOCAL_HALVES, abs=0.005)


@pytest.mark.parametrize("sizes", [[1, 5], [2, 1, 3], [6, 0]])
def test_whitening_reference_case_split_over_ranks(sizes):
    """The advantages of docs/reference-cases.md §1, cut into shards of `sizes` tokens, whiten to the reference numbers."""
    adv, mask = torch.tensor([ADVANTAGES], dtype=torch.float64), torch.ones(1, 6)
    cols = [0, *torch.tensor(sizes).cumsum(0).tolist()]
    shards = [(adv[:, a:b], mask[:, a:b]) for a, b in itertools.pairwise(cols)]

    def rank_part(shard, reduce):
        x, m = shard
        return (
            masked_mean(x, m, reduce=reduce),
            masked_var(x, m, reduce=reduce),
            masked_whiten(x, m, reduce=reduce),
        )

    parts = on_ranks(rank_part, shards)
    for mean, var, _ in parts:
        assert mean.item() == pytest.approx(0.5499116, abs=1e-7)
        assert var.item() == pytest.approx(0.0074886, abs=1e-7)
    assert torch.cat([w for _, _, w in parts], dim=1)[0].tolist() == pytest.approx(WHITENED, abs=1e-5)


@pytest.mark.parametrize("seed", range(6))
def test_batch_statistics_on_random_shards_equal_one_process(seed):
    g = torch.Generator().manual_seed(seed)
    B, T = 9, 11
    x = torch.randn(B, T, generator=g, dtype=torch.float64) * 3 + 1
    v = torch.randn(B, T, generator=g, dtype=torch.float64)
    mask = (torch.rand(B, T, generator=g) < 0.6).long()
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(B + 1), k=rng.randint(1, 3)))  # some shards may be empty
    sizes = [b - a for a, b in zip([0, *cuts], [*cuts, B], strict=True)]

    def stats(shard, reduce):
        xs, vs, ms = shard
        return (
            masked_mean(xs, ms, reduce=reduce),
            masked_var(xs, ms, reduce=reduce),
            masked_var(xs, ms, unbiased=False, reduce=reduce),
            masked_whiten(xs, ms, reduce=reduce),
            masked_whiten(xs, ms, shift_mean=False, reduce=reduce),
            explained_variance(vs, xs, ms, reduce=reduce),
        )

    one = stats((x, v, mask), LOCAL)
    parts = on_ranks(
        stats, list(zip(_shards(x, sizes), _shards(v, sizes), _shards(mask, sizes), strict=True))
    )
    for k in (0, 1, 2, 5):  # scalars: every rank holds the whole batch's value
        for p in parts:
            assert p[k].item() == pytest.approx(one[k].item(), rel=1e-12, abs=1e-12)
    for k in (3, 4):
        assert torch.allclose(torch.cat([p[k] for p in parts]), one[k], rtol=1e-12, atol=1e-12)


def _group_python(scores, groups, norm_by_std, leave_one_out):
    """GRPO / RLOO by hand: per-group lists of scores over the whole batch."""
    by = group_stats_python(scores, groups)
    out = []
    for s, gid in zip(scores, groups, strict=True):
        xs = by[gid]
        if len(xs) == 1 or len(set(xs)) == 1:
            out.append(0.0)
            continue
        mean = sum(xs) / len(xs)
        if leave_one_out:
            out.append(s - (sum(xs) - s) / (len(xs) - 1))
        else:
            std = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))
            out.append((s - mean) / (std + 1e-6) if norm_by_std else s - mean)
    return out


GROUP_CASES = [
    # The report's rewards in two groups, each split across the two ranks.
    (REWARDS, ["a", "b", "a", "b"], [2, 2]),
    # A tie spanning ranks (c: 0.3 on both), a singleton (d), a group on one rank only (e), an empty rank.
    ([0.3, 1.0, 2.0, 0.3, 0.5, 0.0, 4.0], ["c", "e", "e", "c", "d", "a", "a"], [3, 0, 4]),
]


@pytest.mark.parametrize(("scores", "groups", "sizes"), GROUP_CASES)
@pytest.mark.parametrize("algo", ["grpo", "grpo-no-std", "rloo"])
@pytest.mark.parametrize("as_tensor", [False, True])
def test_group_baselines_with_groups_split_over_ranks(scores, groups, sizes, algo, as_tensor):
    s = torch.tensor(scores, dtype=torch.float64)
    mask = torch.ones(len(scores), 3)
    mask[:, 2] = 0
    ids = torch.tensor([ord(gid) for gid in groups]) if as_tensor else groups

    def advantages(shard, reduce):
        sc, gid, mk = shard
        if algo == "rloo":
            return rloo_advantages(sc, gid, mk, reduce=reduce)
        return grpo_advantages(sc, gid, mk, norm_by_std=algo == "grpo", reduce=reduce)

    one = advantages((s, ids, mask), LOCAL)
    expected = _group_python(scores, groups, algo != "grpo-no-std", algo == "rloo")
    assert one[:, 0].tolist() == pytest.approx(expected, abs=1e-9)
    shards = list(
        zip(
            _shards(s, sizes),
            _shards(ids, sizes),
            _shards(mask, sizes),
            strict=True,
        )
    )
    parts = torch.cat(on_ranks(advantages, shards))
    assert torch.allclose(parts, one, atol=1e-12, rtol=0)
    assert (parts[:, 2] == 0).all()
    if algo == "grpo" and groups == GROUP_CASES[0][1]:  # alone, each rank sees singleton groups: all 0
        assert torch.cat([advantages(sh, LOCAL) for sh in shards]).abs().max().item() == 0.0


def test_adaptive_kl_controller_moves_alike_on_every_rank():
    g = torch.Generator().manual_seed(3)
    B, T = 6, 5
    lp, ref = torch.randn(B, T, generator=g), torch.randn(B, T, generator=g)
    mask = (torch.rand(B, T, generator=g) < 0.7).long()
    mask[:, 0] = 1
    mask[:2] *= 0  # rows 0 and 1 (rank 0's) have no KL at all: the ranks' means differ
    mask[:2, 0] = 1
    scores = torch.zeros(B, T)

    def step(shard, reduce):
        sc, a, b, m = shard
        ctrl = AdaptiveKLController(0.2, target=0.05, horizon=10)
        _, metrics = apply_kl_penalty(sc, a, b, m, ctrl, "k3", reduce=reduce)
        return ctrl.value, metrics["actor/reward_kl_penalty"]

    one = step((scores, lp, ref, mask), LOCAL)
    shards = list(zip(*(_shards(t, [2, 4]) for t in (scores, lp, ref, mask)), strict=True))
    for value, kl in on_ranks(step, shards):
        assert value == pytest.approx(one[0], rel=1e-6)
        assert kl == pytest.approx(one[1], rel=1e-6)
    assert step(shards[0], LOCAL)[0] != pytest.approx(one[0], rel=1e-6)  # alone, rank 0 drifts


@pytest.mark.parametrize(("sizes", "mini_batch_size"), [([3, 0, 5], 3), ([4, 4], 3), ([1, 6], 8), ([5], 2)])
def test_mini_batches_hold_the_one_process_rows(sizes, mini_batch_size):
    """Mapped back to global row numbers (rank 0's rows first), the ranks' shares of each mini-batch
    are exactly one process's mini-batch, whatever generator the other ranks bring."""
    total = sum(sizes)
    one = mini_batch_rows(total, mini_batch_size, torch.Generator().manual_seed(11))
    offsets = [sum(sizes[:r]) for r in range(len(sizes))]

    def rows(rank, reduce):
        return mini_batch_rows(
            sizes[rank], mini_batch_size, torch.Generator().manual_seed(11 + rank), reduce=reduce
        )

    parts = on_ranks(rows, list(range(len(sizes))))
    assert all(len(p) == len(one) for p in parts)  # same number of mini-batches on every rank
    for k, rows_k in enumerate(one):
        shares = [p[k] + off for p, off in zip(parts, offsets, strict=True)]
        for share, n, off in zip(shares, sizes, offsets, strict=True):
            assert ((share >= off) & (share < off + n)).all()  # each rank indexes its own rows
        assert sorted(torch.cat(shares).tolist()) == sorted(rows_k.tolist())
    assert sorted(torch.cat(one).tolist()) == list(range(total))
