"""Rollout correction (verl's option names and semantics): truncated IS weights, rejection by k1/k2/k3
divergences per token or per sequence, the diagnostics; against hand values and a Python loop."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.algos import policy_loss, policy_loss_gspo
from agentrl.algos.rollout_correction import (
    RS_OPTIONS,
    parse_rs_options,
    rollout_correction,
    rollout_is_weights,
)
from tests.reference_algos import policy_loss_python, rollout_correction_python

# log r = old − rollout = [0.5, 0, −0.2], plus a padding position
OLD = torch.tensor([[-1.0, -2.0, -0.5, 0.0]], dtype=torch.float64)
ROLL = torch.tensor([[-1.5, -2.0, -0.3, -9.0]], dtype=torch.float64)
MASK = torch.tensor([[1, 1, 1, 0]])


def test_token_is_weights_truncated_and_their_metrics_by_hand():
    w, keep, m = rollout_correction(OLD, ROLL, MASK, rollout_is="token", rollout_is_threshold=1.5)
    # e^0.5 = 1.64872 truncated to 1.5; e^0 = 1; e^−0.2 = 0.81873; padding: 1 (no weight)
    assert w.tolist()[0] == pytest.approx([1.5, 1.0, 0.8187307531, 1.0])
    assert keep.tolist() == [[1.0, 1.0, 1.0, 1.0]]
    assert m["rollout_corr/rollout_is_mean"] == pytest.approx((1.6487212707 + 1 + 0.8187307531) / 3)
    assert m["rollout_corr/rollout_is_max"] == pytest.approx(1.6487212707)
    assert m["rollout_corr/rollout_is_min"] == pytest.approx(0.8187307531)
    assert m["rollout_corr/rollout_is_eff_sample_size"] == pytest.approx(0.93648594, rel=1e-6)
    assert m["rollout_corr/rollout_is_ratio_fraction_high"] == pytest.approx(1 / 3)
    # KL(π_rollout ‖ π_trainer): k1 = mean(rollout − old) = −0.1; k3 = mean(e^x − 1 − x) = 0.0558173
    assert m["rollout_corr/kl"] == pytest.approx(-0.1)
    assert m["rollout_corr/k3_kl"] == pytest.approx(0.0558173413)
    # per-sequence PPL: exp(−mean log-prob): trainer exp(3.5/3), rollout exp(3.8/3)
    assert m["rollout_corr/training_ppl"] == pytest.approx(3.2112705, rel=1e-6)
    assert m["rollout_corr/rollout_ppl"] == pytest.approx(3.5490028, rel=1e-6)


def test_sequence_is_weight_is_the_truncated_product():
    w, _, m = rollout_correction(OLD, ROLL, MASK, rollout_is="sequence", rollout_is_threshold=1.2)
    assert w.tolist()[0] == pytest.approx([1.2, 1.2, 1.2, 1.0])  # e^0.3 = 1.34986 → 1.2
    assert m["rollout_corr/rollout_is_max"] == pytest.approx(1.3498588076)
    w, _, _ = rollout_correction(OLD, ROLL, MASK, rollout_is="sequence", rollout_is_threshold=2.0)
    assert w.tolist()[0] == pytest.approx([1.3498588076] * 3 + [1.0])


@pytest.mark.parametrize(
    ("rs", "threshold", "keep"),
    [
        ("token_k3", 0.1, [0, 1, 1]),  # k3 = [0.1487, 0, 0.0187]
        ("token_k2", 0.1, [0, 1, 1]),  # k2 = [0.125, 0, 0.02]
        ("token_k1", "0.7_1.3", [0, 1, 1]),  # k1 = −log r = [−0.5, 0, 0.2] against [log 0.7, log 1.3]
        ("token_k1", 1.3, [0, 1, 1]),  # lower = 1/1.3: [−0.262, 0.262]
        ("seq_mean_k2", 0.05, [1, 1, 1]),  # mean k2 = 0.04833
        ("seq_mean_k2", 0.04, [0, 0, 0]),
        ("seq_sum_k3", 0.2, [1, 1, 1]),  # sum k3 = 0.16745
        ("seq_sum_k3", 0.15, [0, 0, 0]),
        ("seq_sum_k1", "0.5_2", [1, 1, 1]),  # sum k1 = −0.3 in [−0.693, 0.693]
        ("seq_max_k3", 0.1, [0, 0, 0]),  # max k3 = 0.1487
        ("token_k3,seq_mean_k2", "0.1,0.05", [0, 1, 1]),  # ANDed
    ],
)
def test_rejection_options_by_hand(rs, threshold, keep):
    _, k, m = rollout_correction(OLD, ROLL, MASK, rollout_rs=rs, rollout_rs_threshold=threshold)
    assert k.tolist()[0] == [float(x) for x in keep] + [1.0]
    assert m["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(1 - sum(keep) / 3)
    assert m["rollout_corr/rollout_rs_seq_masked_fraction"] == float(sum(keep) < 3)


def test_threshold_parsing_follows_verl():
    assert parse_rs_options("token_k1", 2.0) == [("token_k1", 0.5, 2.0)]
    assert parse_rs_options("token_k1, seq_max_k3", "0.9_1.1,0.01") == [
        ("token_k1", 0.9, 1.1),
        ("seq_max_k3", None, 0.01),
    ]
    for rs, th, msg in [
        ("seq_max_k1", 1.0, "unknown option"),
        ("token_k2", None, "needs rollout_rs_threshold"),
        ("token_k2", "0.1_0.2", "not a valid threshold"),
        ("token_k2,token_k3", "1,2,3", "one per option"),
        ("token_k3", -1, "must be positive"),
    ]:
        with pytest.raises(ValueError, match=msg):
            parse_rs_options(rs, th)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_matches_the_python_loop(data):
    B, T = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 6))
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 10_000)))
    old = -torch.rand(B, T, generator=g, dtype=torch.float64) * 3
    roll = old + torch.randn(B, T, generator=g, dtype=torch.float64) * data.draw(st.sampled_from([0.05, 0.5]))
    mask = (torch.rand(B, T, generator=g) < 0.8).long()
    mask[0, 0] = 1
    level = data.draw(st.sampled_from([None, "token", "sequence"]))
    thr = data.draw(st.sampled_from([1.2, 2.0, 5.0]))
    rs = data.draw(st.lists(st.sampled_from(RS_OPTIONS), min_size=1, max_size=3, unique=True))
    rs_thr = ",".join(str(data.draw(st.sampled_from([0.01, 0.1, 0.5, 2.0]))) for _ in rs)
    w, keep, m = rollout_correction(
        old, roll, mask, rollout_is=level, rollout_is_threshold=thr,
        rollout_rs=",".join(rs), rollout_rs_threshold=rs_thr,
    )  # fmt: skip
    ref_w, ref_keep, ref_m = rollout_correction_python(
        old.tolist(), roll.tolist(), mask.tolist(), level, thr, parse_rs_options(",".join(rs), rs_thr)
    )
    assert torch.allclose(w, torch.tensor(ref_w, dtype=torch.float64), rtol=1e-9, atol=1e-12)
    assert keep.tolist() == ref_keep
    for key, value in ref_m.items():
        assert m[f"rollout_corr/{key}"] == pytest.approx(value, rel=1e-6, abs=1e-9), key


def test_weights_scale_the_clipped_per_token_loss():
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(3, 5, generator=g, dtype=torch.float64)
    new = old + 0.3 * torch.randn(3, 5, generator=g, dtype=torch.float64)
    adv = torch.randn(3, 5, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 1, 1, 1, 0]])
    w = 0.5 + torch.rand(3, 5, generator=g, dtype=torch.float64)
    args = (old.tolist(), new.tolist(), adv.tolist(), mask.tolist(), 0.2, 0.28)
    loss, _ = policy_loss(old, new, adv, mask, 0.2, 0.28, clip_c=3.0, is_weights=w)
    assert loss.item() == pytest.approx(policy_loss_python(*args, clip_c=3.0, weights=w.tolist()))
    loss, _ = policy_loss_gspo(old, new, adv, mask, 0.2, 0.28, agg="token-mean", is_weights=w)
    assert loss.item() == pytest.approx(policy_loss_python(*args, weights=w.tolist(), sequence=True))


def test_batch_normalisation_and_a_shard_without_tokens():
    w, _, m = rollout_correction(OLD, ROLL, MASK, rollout_is="token", rollout_is_threshold=1.5,
                                 rollout_is_batch_normalize=True)  # fmt: skip
    mean = (1.5 + 1.0 + 0.8187307531) / 3
    assert w.tolist()[0] == pytest.approx([1.5 / mean, 1.0 / mean, 0.8187307531 / mean, 1.0])
    assert m["rollout_corr/rollout_is_batch_norm_factor"] == pytest.approx(mean)
    # sequence level: the mean over sequences of their weight (rows without tokens left out)
    old2, roll2 = torch.cat([OLD, OLD]), torch.cat([ROLL, OLD])
    mask2 = torch.cat([MASK, MASK])
    w, _, _ = rollout_correction(old2, roll2, mask2, rollout_is="sequence", rollout_is_threshold=5.0,
                                 rollout_is_batch_normalize=True)  # fmt: skip
    norm = (1.3498588076 + 1.0) / 2
    assert w[:, 0].tolist() == pytest.approx([1.3498588076 / norm, 1.0 / norm])
    # no token with both log-probs: weight 1, nothing rejected, no metrics
    none = torch.zeros_like(MASK)
    for normalize in (False, True):
        w, keep, m = rollout_correction(OLD, ROLL, none, rollout_is="token", rollout_rs="token_k3",
                                        rollout_rs_threshold=0.1, rollout_is_batch_normalize=normalize)  # fmt: skip
        assert (w == 1).all() and (keep == 1).all()
        assert set(m) <= {"rollout_corr/rollout_is_batch_norm_factor"}


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_batch_normalised_weights_on_three_ranks_equal_one_process(level):
    from agentrl.algos import LOCAL
    from tests.simulated_ranks import on_ranks

    g = torch.Generator().manual_seed(7)
    old = -torch.rand(6, 5, generator=g, dtype=torch.float64)
    roll = old + 0.4 * torch.randn(6, 5, generator=g, dtype=torch.float64)
    mask = (torch.rand(6, 5, generator=g) < 0.7).long()
    mask[:2] = 0  # rank 0's first rows have no comparable token

    def weights(part, reduce):
        o, r, m = part
        return rollout_correction(o, r, m, rollout_is=level, rollout_is_threshold=1.5,
                                  rollout_is_batch_normalize=True, reduce=reduce)[0]  # fmt: skip

    one = weights((old, roll, mask), LOCAL)
    blocks = ((0, 2), (2, 4), (4, 6))  # rank 0: no token at all
    parts = [(old[a:b], roll[a:b], mask[a:b]) for a, b in blocks]
    assert torch.allclose(torch.cat(on_ranks(weights, parts)), one, rtol=1e-12)
    assert not torch.allclose(
        one, rollout_correction(old, roll, mask, rollout_is=level, rollout_is_threshold=1.5)[0]
    )


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("value", [0.0, 0.1, -0.3, 1e-7, 0.7])
def test_equal_weights_have_an_effective_sample_size_of_exactly_one(level, dtype, value):
    # Every token carries the same log-ratio, so every weight is the same: ESS = 1 exactly (the
    # float32 ratio form gave 1.0000001 on AVX2 kernels, above its own Cauchy–Schwarz bound).
    for shape in [(1, 1), (3, 7), (16, 333), (64, 1025)]:
        lr = torch.full(shape, value, dtype=dtype)
        mask = torch.ones(shape, dtype=torch.long)
        if level == "token" and shape[1] > 1:
            mask[0, -1] = 0  # a padded position (at sequence level it would change row 0's weight)
        _, m = rollout_is_weights(lr, mask, level, threshold=2.0)
        assert m["rollout_is_eff_sample_size"] == 1.0, (shape, value)
        assert m["rollout_is_std"] == pytest.approx(0.0, abs=1e-12)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(-30.0, 30.0, allow_nan=False), min_size=1, max_size=64),
    st.sampled_from([1.0001, 1.5, 2.0, 10.0, 1e4]),
    st.sampled_from([torch.float32, torch.float64]),
)
def test_effective_sample_size_stays_in_its_range_and_equals_the_python_formula(logs, threshold, dtype):
    lr = torch.tensor([logs], dtype=dtype)
    _, m = rollout_is_weights(lr, torch.ones_like(lr, dtype=torch.long), "token", threshold=threshold)
    ess = m["rollout_is_eff_sample_size"]
    assert 0.0 < ess <= 1.0
    # the slow formula on Python floats over the same (clamped, dtype-rounded) weights
    clamped = torch.exp(lr[0]).clamp(1.0 / threshold, threshold).tolist()
    mean = sum(clamped) / len(clamped)
    assert ess == pytest.approx(1.0 / (sum((c / mean) ** 2 for c in clamped) / len(clamped)), rel=1e-9)
    # one weight at the threshold and the rest at its inverse: the extreme the clamp allows
    n = len(logs)
    ext = torch.full((1, n + 1), -50.0, dtype=dtype)
    ext[0, 0] = 50.0
    _, m = rollout_is_weights(ext, torch.ones_like(ext, dtype=torch.long), "token", threshold=threshold)
    hi, lo = threshold, 1.0 / threshold
    mean = (hi + n * lo) / (n + 1)
    want = mean**2 / ((hi**2 + n * lo**2) / (n + 1))
    assert m["rollout_is_eff_sample_size"] == pytest.approx(want, rel=1e-6)
    assert 0.0 < m["rollout_is_eff_sample_size"] <= 1.0
