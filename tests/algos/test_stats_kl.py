"""Masked statistics, KL estimators and controllers."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.algos import (
    AdaptiveKLController,
    FixedKLController,
    apply_kl_penalty,
    explained_variance,
    kl_penalty,
    masked_mean,
    masked_var,
    masked_whiten,
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.floats(-100, 100, allow_nan=False), st.integers(0, 1)), min_size=1, max_size=40),
    st.booleans(),
)
def test_masked_stats_match_python(pairs, unbiased):
    x = torch.tensor([[p[0] for p in pairs]], dtype=torch.float64)
    m = torch.tensor([[p[1] for p in pairs]])
    kept = [p[0] for p in pairs if p[1]]
    n = len(kept)
    mean = sum(kept) / (n + 1e-8)
    assert masked_mean(x, m).item() == pytest.approx(mean, abs=1e-9)
    mu = sum(kept) / n if n else 0.0
    var = sum((v - mu) ** 2 for v in kept) / (n + 1e-8)
    if unbiased and n > 1:
        var = var * n / (n - 1)
    assert masked_var(x, m, unbiased=unbiased).item() == pytest.approx(var, rel=1e-6, abs=1e-9)
    w = masked_whiten(x, m)
    assert torch.isfinite(w).all()


def test_masked_mean_ignores_nan_and_inf_on_masked_positions():
    x = torch.tensor([[1.0, float("nan"), float("inf"), 3.0]])
    m = torch.tensor([[1, 0, 0, 1]])
    assert masked_mean(x, m).item() == pytest.approx(2.0)
    assert masked_mean(x, m, dim=-1).tolist() == pytest.approx([2.0])


def test_masked_mean_rows_and_empty_mask():
    x = torch.tensor([[1.0, 2.0], [5.0, 7.0]])
    m = torch.tensor([[1, 1], [0, 0]])
    assert masked_mean(x, m, dim=-1).tolist() == pytest.approx([1.5, 0.0])
    assert masked_mean(x, torch.zeros_like(m)).item() == 0.0
    assert masked_var(x, torch.zeros_like(m)).item() == 0.0


def test_whiten_shift_mean_false_keeps_the_mean():
    x = torch.tensor([[1.0, 2.0, 3.0, 10.0]])
    m = torch.tensor([[1, 1, 1, 0]])
    w = masked_whiten(x, m, shift_mean=False)
    assert masked_mean(w, m).item() == pytest.approx(2.0, abs=1e-6)
    assert masked_var(w, m).item() == pytest.approx(1.0, abs=1e-6)


def test_explained_variance():
    ret = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    m = torch.ones(1, 4)
    assert explained_variance(ret, ret, m).item() == pytest.approx(1.0)
    assert explained_variance(torch.zeros(1, 4) + ret.mean(), ret, m).item() == pytest.approx(0.0, abs=1e-6)
    assert explained_variance(ret, torch.ones(1, 4), m).item() == 0.0  # no variance in returns: 0, not NaN


@settings(max_examples=100, deadline=None)
@given(st.floats(-8, 8), st.floats(-8, 8))
def test_kl_kinds_against_formulas(lp, ref):
    a = torch.tensor([lp], dtype=torch.float64)
    b = torch.tensor([ref], dtype=torch.float64)
    k1 = lp - ref
    assert kl_penalty(a, b, "k1").item() == pytest.approx(k1)
    assert kl_penalty(a, b, "kl").item() == pytest.approx(k1)
    assert kl_penalty(a, b, "abs").item() == pytest.approx(abs(k1))
    assert kl_penalty(a, b, "k2").item() == pytest.approx(0.5 * k1 * k1)
    k3 = math.exp(-k1) + k1 - 1
    assert kl_penalty(a, b, "k3").item() == pytest.approx(min(k3, 10.0), rel=1e-9)
    assert kl_penalty(a, b, "k3").item() >= 0.0


def test_k3_is_clamped():
    assert kl_penalty(torch.tensor([-50.0]), torch.tensor([0.0]), "k3").item() == 10.0
    assert torch.isfinite(kl_penalty(torch.tensor([0.0]), torch.tensor([-1e4]), "k3")).all()


def test_straight_through_kind_has_k3_value_and_k2_gradient():
    lp = torch.tensor([-0.3], requires_grad=True)
    ref = torch.tensor([-1.0])
    v = kl_penalty(lp, ref, "k3+")
    assert v.item() == pytest.approx(kl_penalty(lp, ref, "k3").item())
    v.backward()
    assert lp.grad.item() == pytest.approx(0.7)  # d/dlp ½(lp − ref)² = lp − ref


def test_unknown_kl_kind():
    with pytest.raises(ValueError, match="unknown KL kind"):
        kl_penalty(torch.zeros(1), torch.zeros(1), "k7")


def test_adaptive_controller_hand_computed():
    c = AdaptiveKLController(init=0.1, target=6.0, horizon=10000)
    c.update(current_kl=9.0, n_steps=256)  # error clipped to 0.2
    assert c.value == pytest.approx(0.1 * (1 + 0.2 * 256 / 10000))
    c = AdaptiveKLController(init=0.1, target=6.0, horizon=10000)
    c.update(current_kl=5.4, n_steps=100)  # error −0.1
    assert c.value == pytest.approx(0.1 * (1 - 0.1 * 100 / 10000))
    f = FixedKLController(0.05)
    f.update(100.0, 10)
    assert f.value == 0.05


def test_apply_kl_penalty_only_on_policy_tokens_and_updates_controller():
    scores = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]])
    lp = torch.tensor([[-1.0, -1.0, -1.0], [-2.0, -2.0, -2.0]])
    ref = torch.tensor([[-1.5, -1.5, -1.5], [-1.0, -1.0, -1.0]])
    mask = torch.tensor([[1, 0, 1], [1, 1, 0]])
    ctl = AdaptiveKLController(0.1, target=1.0, horizon=100)
    rewards, metrics = apply_kl_penalty(scores, lp, ref, mask, ctl, kind="k1")
    assert rewards.flatten().tolist() == pytest.approx([-0.05, 0.0, 0.95, 0.1, 2.1, 0.0])
    assert metrics["actor/reward_kl_penalty"] == pytest.approx((0.5 + -1.0) / 2)
    assert metrics["actor/reward_kl_penalty_coeff"] == 0.1
    assert ctl.value == pytest.approx(0.1 * (1 - 0.2 * 2 / 100))
