"""The hand-computed reference cases (docs/reference-cases.md), reproduced exactly."""

import pytest
import torch

from agentrl.algos import FixedKLController, apply_kl_penalty, gae, masked_var, masked_whiten

REWARDS = [-0.01, -0.005, 0.005, -0.01, -0.02, 0.995]
VALUES = [0.20, 0.25, 0.30, 0.35, 0.45, 0.60]
ADVANTAGES = [0.6210805, 0.6116637, 0.5964881, 0.5699875, 0.5052500, 0.3950000]
RETURNS = [0.8210805, 0.8616637, 0.8964881, 0.9199875, 0.9552500, 0.9950000]
WHITENED = [0.82241, 0.71359, 0.53823, 0.23199, -0.51610, -1.79012]


def test_kl_in_reward_step_gives_reference_rewards():
    scores = torch.tensor([[0, 0, 0, 0, 0, 1.0]])
    kl = torch.tensor([[0.1, 0.05, -0.05, 0.1, 0.2, 0.05]])
    # k1 is logprob − ref_logprob, so ref_logprob = −kl with logprob = 0 reproduces the KL column.
    rewards, metrics = apply_kl_penalty(
        scores, torch.zeros(1, 6), -kl, torch.ones(1, 6), FixedKLController(0.1), kind="k1"
    )
    assert rewards[0].tolist() == pytest.approx(REWARDS, abs=1e-7)
    assert metrics["actor/reward_kl_penalty_coeff"] == 0.1
    assert metrics["actor/reward_kl_penalty"] == pytest.approx(sum(kl[0].tolist()) / 6, abs=1e-7)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_one_plus_one_gae(dtype):
    adv, ret = gae(
        torch.tensor([REWARDS], dtype=dtype), torch.tensor([VALUES], dtype=dtype), torch.ones(1, 6), 1.0, 0.95
    )
    assert adv.dtype == dtype
    assert adv[0].tolist() == pytest.approx(ADVANTAGES, abs=1e-6)
    assert ret[0].tolist() == pytest.approx(RETURNS, abs=1e-6)


def test_one_plus_one_whitening_uses_unbiased_variance():
    adv = torch.tensor([ADVANTAGES], dtype=torch.float64)
    mask = torch.ones(1, 6)
    assert adv.mean().item() == pytest.approx(0.5499116, abs=1e-7)
    assert masked_var(adv, mask).item() == pytest.approx(0.0074886, abs=1e-7)
    assert masked_whiten(adv, mask)[0].tolist() == pytest.approx(WHITENED, abs=1e-5)


def test_returns_use_unwhitened_advantages():
    _, ret = gae(torch.tensor([REWARDS]), torch.tensor([VALUES]), torch.ones(1, 6), 1.0, 0.95)
    # A whitened return would be whitened advantage + value; the reference return is not.
    assert ret[0, 0].item() == pytest.approx(0.8210805, abs=1e-6)


def test_multi_turn_hole_bootstraps_across_the_observation():
    mask = torch.tensor([[1, 1, 0, 0, 0, 1, 1, 0]])
    rewards = torch.zeros(1, 8)
    rewards[0, 6] = 1.0
    for junk in (0.0, 5.0, -3.0, float("nan")):  # `*` values must not matter
        values = torch.tensor([[0.1, 0.2, junk, junk, junk, 0.3, 0.4, junk]])
        adv, ret = gae(rewards, values, mask, 1.0, 0.95)
        got = adv[0].tolist()
        assert [got[i] for i in (0, 1, 5, 6)] == pytest.approx([0.799675, 0.7365, 0.67, 0.60], abs=1e-6)
        assert [got[i] for i in (2, 3, 4, 7)] == [0.0, 0.0, 0.0, 0.0]
        assert not torch.isnan(ret).any()


def test_reward_on_a_masked_token_is_ignored():
    mask = torch.tensor([[1, 1, 0]])
    values = torch.tensor([[0.5, 0.5, 0.5]])
    a1, _ = gae(torch.tensor([[0.0, 1.0, 0.0]]), values, mask, 1.0, 1.0)
    a2, _ = gae(torch.tensor([[0.0, 1.0, 7.0]]), values, mask, 1.0, 1.0)
    assert torch.equal(a1, a2)
