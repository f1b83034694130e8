"""Advantage estimators against slow references, over random masks with holes and empty rows."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.algos import (
    discounted_reverse_cumsum,
    gae,
    grpo_advantages,
    masked_whiten,
    reinforce_pp_advantages,
    rloo_advantages,
    td_residuals,
)
from tests.reference_algos import gae_loop, gae_python, group_stats_python, reward_to_go_python

floats = st.floats(-5, 5, allow_nan=False, width=32)


@st.composite
def batches(draw, max_b=4, max_t=24):
    """Random [B, T] rewards, values and 0/1 masks: holes, leading/trailing zeros, all-zero rows."""
    b = draw(st.integers(1, max_b))
    t = draw(st.integers(1, max_t))
    mask = draw(st.lists(st.lists(st.integers(0, 1), min_size=t, max_size=t), min_size=b, max_size=b))
    if draw(st.booleans()):
        mask[0] = [0] * t  # an all-zero row
    rewards = draw(st.lists(st.lists(floats, min_size=t, max_size=t), min_size=b, max_size=b))
    values = draw(st.lists(st.lists(floats, min_size=t, max_size=t), min_size=b, max_size=b))
    return rewards, values, mask


gammas = st.sampled_from([1.0, 0.99, 0.9, 0.5, 0.0])
lams = st.sampled_from([1.0, 0.95, 0.5, 0.0])


@settings(max_examples=150, deadline=None)
@given(batches(), gammas, lams)
def test_gae_matches_python_reference(batch, gamma, lam):
    rewards, values, mask = batch
    adv, ret = gae(
        torch.tensor(rewards, dtype=torch.float64),
        torch.tensor(values, dtype=torch.float64),
        torch.tensor(mask),
        gamma,
        lam,
    )
    ref_a, ref_r = gae_python(rewards, values, mask, gamma, lam)
    assert torch.allclose(adv, torch.tensor(ref_a, dtype=torch.float64), atol=1e-9)
    assert torch.allclose(ret, torch.tensor(ref_r, dtype=torch.float64), atol=1e-9)


@settings(max_examples=60, deadline=None)
@given(batches(), gammas, lams)
def test_gae_matches_verl_style_loop_on_policy_tokens(batch, gamma, lam):
    rewards, values, mask = batch
    r, v, m = torch.tensor(rewards), torch.tensor(values), torch.tensor(mask, dtype=torch.float32)
    adv, ret = gae(r, v, m, gamma, lam)
    ref_a, ref_r = gae_loop(r.double(), v.double(), m.double(), gamma, lam)
    assert torch.allclose(adv.double(), ref_a, atol=1e-4)
    assert torch.allclose(ret.double(), ref_r, atol=1e-4)


@settings(max_examples=100, deadline=None)
@given(batches(), gammas)
def test_td_residuals(batch, gamma):
    rewards, values, mask = batch
    d = td_residuals(
        torch.tensor(rewards, dtype=torch.float64),
        torch.tensor(values, dtype=torch.float64),
        torch.tensor(mask),
        gamma,
    )
    # δ is the GAE advantage with λ = 0.
    ref_a, _ = gae_python(rewards, values, mask, gamma, 0.0)
    assert torch.allclose(d, torch.tensor(ref_a, dtype=torch.float64), atol=1e-9)


@pytest.mark.parametrize("c", [0.0, 0.5, 0.95, 0.999, 1.0])
@pytest.mark.parametrize("n", [1, 63, 64, 65, 1000])
def test_discounted_reverse_cumsum_long(c, n):
    x = torch.randn(3, n, dtype=torch.float64, generator=torch.Generator().manual_seed(n))
    y = discounted_reverse_cumsum(x, c)
    ref = torch.zeros_like(x)
    acc = torch.zeros(3, dtype=torch.float64)
    for t in reversed(range(n)):
        acc = x[:, t] + c * acc
        ref[:, t] = acc
    assert torch.allclose(y, ref, atol=1e-9, rtol=1e-9)


def test_gae_is_finite_on_long_sequences():
    T = 5000
    r = torch.zeros(2, T)
    r[:, -1] = 1.0
    adv, ret = gae(r, torch.rand(2, T), torch.ones(2, T), 1.0, 0.95)
    assert torch.isfinite(adv).all() and torch.isfinite(ret).all()


def test_gae_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match=r"\[B, T\]"):
        gae(torch.zeros(2, 3), torch.zeros(2, 4), torch.ones(2, 3), 1.0, 1.0)


# ---- GRPO / RLOO -----------------------------------------------------------------------------

group_lists = st.lists(
    st.tuples(st.integers(0, 3), st.sampled_from([0.0, 0.5, 1.0, 2.5, -1.0])), min_size=1, max_size=12
)


@settings(max_examples=150, deadline=None)
@given(group_lists, st.booleans())
def test_grpo_matches_reference(items, norm_by_std):
    groups = [f"task-{g}" for g, _ in items]
    scores = [s for _, s in items]
    mask = torch.ones(len(items), 3)
    mask[:, 2] = 0
    adv = grpo_advantages(torch.tensor(scores, dtype=torch.float64), groups, mask, norm_by_std=norm_by_std)
    by = group_stats_python(scores, groups)
    for i, (g, s) in enumerate(zip(groups, scores, strict=True)):
        xs = by[g]
        if len(xs) == 1 or len(set(xs)) == 1:
            expected = 0.0
        else:
            mean = sum(xs) / len(xs)
            std = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))
            expected = (s - mean) / (std + 1e-6) if norm_by_std else s - mean
        assert adv[i, 0].item() == pytest.approx(expected, abs=1e-9)
        assert adv[i, 1].item() == adv[i, 0].item()  # every policy token shares it
        assert adv[i, 2].item() == 0.0
    assert not torch.isnan(adv).any()


@settings(max_examples=100, deadline=None)
@given(group_lists)
def test_rloo_matches_reference(items):
    groups = [g for g, _ in items]
    scores = [s for _, s in items]
    adv = rloo_advantages(
        torch.tensor(scores, dtype=torch.float64), torch.tensor(groups), torch.ones(len(items), 2)
    )
    by = group_stats_python(scores, groups)
    for i, (g, s) in enumerate(zip(groups, scores, strict=True)):
        xs = by[g]
        expected = 0.0 if len(xs) == 1 or len(set(xs)) == 1 else s - (sum(xs) - s) / (len(xs) - 1)
        assert adv[i, 0].item() == pytest.approx(expected, abs=1e-9)


def test_grpo_singleton_and_tied_groups_are_exactly_zero():
    scores = torch.tensor([0.3, 0.3, 0.3, 0.7, 0.1, 0.2], dtype=torch.float32)
    adv = grpo_advantages(scores, ["a", "a", "a", "b", "c", "c"], torch.ones(6, 4))
    assert adv[:4].abs().max().item() == 0.0
    assert adv[4, 0].item() == pytest.approx(-0.05 / (math.sqrt(0.005) + 1e-6), rel=1e-5)
    assert torch.isfinite(adv).all()


def test_grpo_reference_case_three_shares_the_advantage_across_turns():
    # docs/reference-cases.md §3: the good report scores 2.5, the gossip one 0.5; one group.
    mask = torch.tensor([[1, 1, 0, 0, 1, 1], [1, 0, 0, 1, 1, 0]])
    adv = grpo_advantages(torch.tensor([2.5, 0.5]), ["alphabet", "alphabet"], mask)
    std = math.sqrt(2.0)  # unbiased std of {2.5, 0.5}
    assert adv[0][mask[0].bool()].tolist() == pytest.approx([1.0 / (std + 1e-6)] * 4)
    assert adv[1][mask[1].bool()].tolist() == pytest.approx([-1.0 / (std + 1e-6)] * 3)


# ---- REINFORCE++ -----------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(batches(), st.sampled_from([1.0, 0.9]))
def test_reinforce_pp_skips_masked_tokens_then_whitens(batch, gamma):
    rewards, _, mask = batch
    r = torch.tensor(rewards, dtype=torch.float64)
    m = torch.tensor(mask)
    adv = reinforce_pp_advantages(r, m, gamma)
    g = torch.tensor(reward_to_go_python(rewards, mask, gamma), dtype=torch.float64)
    expected = masked_whiten(g, m) * m
    assert torch.allclose(adv, expected, atol=1e-8)


def test_reinforce_pp_carries_the_final_reward_to_earlier_turns():
    mask = torch.tensor([[1, 1, 0, 0, 1, 1]])
    r = torch.tensor([[0, 0, 0, 0, 0, 1.0]])
    # Before whitening every policy token's return is 1 (γ = 1): a reset at the observation would give 0.
    adv = reinforce_pp_advantages(torch.cat([r, torch.zeros(1, 6)]), torch.cat([mask, mask]), 1.0)
    assert adv[0, 0].item() == pytest.approx(adv[0, 5].item())
    assert adv[0, 0].item() > 0 > adv[1, 0].item()
