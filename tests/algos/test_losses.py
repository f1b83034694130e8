"""Loss aggregation, PPO/GSPO policy losses, the value loss, entropy and log-probabilities."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.algos import (
    agg_loss,
    entropy_from_logits,
    logprobs_from_logits,
    policy_loss,
    policy_loss_gspo,
    value_loss,
)


def _rows(loss, mask):
    return [[v for v, m in zip(r, mr, strict=True) if m] for r, mr in zip(loss, mask, strict=True)]


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_agg_modes_match_python(data):
    b = data.draw(st.integers(1, 5))
    t = data.draw(st.integers(1, 8))
    loss = data.draw(st.lists(st.lists(st.floats(-10, 10), min_size=t, max_size=t), min_size=b, max_size=b))
    mask = data.draw(st.lists(st.lists(st.integers(0, 1), min_size=t, max_size=t), min_size=b, max_size=b))
    L = torch.tensor(loss, dtype=torch.float64)
    M = torch.tensor(mask)
    rows = _rows(loss, mask)
    nonempty = [r for r in rows if r]
    tokens = sum(len(r) for r in rows)
    assert agg_loss(L, M, "token-mean").item() == pytest.approx(
        sum(map(sum, rows)) / (tokens + 1e-8), abs=1e-9
    )
    seq_sum = sum(sum(r) for r in nonempty) / max(len(nonempty), 1)
    assert agg_loss(L, M, "seq-mean-token-sum").item() == pytest.approx(seq_sum, abs=1e-9)
    seq_mean = sum(sum(r) / len(r) for r in nonempty) / max(len(nonempty), 1)
    assert agg_loss(L, M, "seq-mean-token-mean").item() == pytest.approx(seq_mean, abs=1e-9)
    assert agg_loss(L, M, "seq-mean-token-sum-norm").item() == pytest.approx(
        sum(map(sum, rows)) / t, abs=1e-9
    )
    assert agg_loss(L, M, "seq-mean-token-sum-norm", norm=100).item() == pytest.approx(
        sum(map(sum, rows)) / 100, abs=1e-9
    )


def test_agg_denominator_makes_micro_batches_add_up():
    torch.manual_seed(0)
    L = torch.randn(6, 5, dtype=torch.float64)
    M = (torch.rand(6, 5) > 0.3).long()
    for mode, denom in (("token-mean", M.sum()), ("seq-mean-token-mean", (M.sum(-1) > 0).sum())):
        full = agg_loss(L, M, mode)
        parts = agg_loss(L[:2], M[:2], mode, denominator=denom) + agg_loss(
            L[2:], M[2:], mode, denominator=denom
        )
        assert parts.item() == pytest.approx(full.item(), abs=1e-8)


def test_unknown_agg_mode():
    with pytest.raises(ValueError, match="unknown loss aggregation mode"):
        agg_loss(torch.zeros(1, 1), torch.ones(1, 1), "seq-sum")


def _policy_loss_python(old, new, adv, mask, lo, hi, c):
    """The loss and its three metrics, one token at a time: (loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower)."""
    import math

    out, clipped, kls, lower = [], [], [], []
    for o, n, a, m in zip(old, new, adv, mask, strict=True):
        if not m:
            continue
        log_ratio = max(min(n - o, 20), -20)
        ratio = math.exp(log_ratio)
        l1 = -a * ratio
        l2 = -a * min(max(ratio, 1 - lo), 1 + hi)
        l = max(l1, l2)
        clipped.append(l2 > l1)
        kls.append(-log_ratio)
        lower.append(c is not None and a < 0 and l > -a * c)
        if a < 0 and c is not None:
            l = min(l, -a * c)
        out.append(l)
    n_tok = len(out) + 1e-8
    return sum(out) / n_tok, sum(clipped) / n_tok, sum(kls) / n_tok, sum(lower) / n_tok


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(-3, 0), st.floats(-3, 0), st.floats(-3, 3), st.integers(0, 1)),
        min_size=1,
        max_size=16,
    ),
    st.sampled_from([(0.2, 0.2, 3.0), (0.2, 0.28, 3.0), (0.1, 0.3, None)]),
)
def test_policy_loss_matches_python(rows, clips):
    old, new, adv, mask = (list(x) for x in zip(*rows, strict=True))
    lo, hi, c = clips
    loss, metrics = policy_loss(
        torch.tensor([old], dtype=torch.float64),
        torch.tensor([new], dtype=torch.float64),
        torch.tensor([adv], dtype=torch.float64),
        torch.tensor([mask]),
        clip_low=lo,
        clip_high=hi,
        clip_c=c,
    )
    want_loss, clipfrac, ppo_kl, clipfrac_lower = _policy_loss_python(old, new, adv, mask, lo, hi, c)
    assert loss.item() == pytest.approx(want_loss, abs=1e-9)
    want = {"pg_clipfrac": clipfrac, "ppo_kl": ppo_kl, "pg_clipfrac_lower": clipfrac_lower}
    assert set(metrics) == set(want)
    for k, value in want.items():
        assert metrics[k].item() == pytest.approx(value, abs=1e-9), k
        assert not metrics[k].requires_grad


def test_policy_loss_clip_metrics_hand_computed():
    old = torch.zeros(1, 4)
    new = torch.log(torch.tensor([[1.5, 1.0, 0.5, 5.0]]))
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]])
    loss, m = policy_loss(old, new, adv, torch.ones(1, 4), clip_low=0.2, clip_high=0.2, clip_c=3.0)
    # token 0: ratio 1.5 > 1.2 with A > 0 → clipped to −1.2; token 1: −1; token 2: ratio 0.5 < 0.8
    # with A < 0 → max(0.5, 0.8) = 0.8; token 3: ratio 5 → max(5, 1.2) = 5, dual clip → min(5, 3) = 3.
    assert loss.item() == pytest.approx((-1.2 - 1.0 + 0.8 + 3.0) / 4, abs=1e-6)
    assert m["pg_clipfrac"].item() == pytest.approx(2 / 4)
    assert m["pg_clipfrac_lower"].item() == pytest.approx(1 / 4)
    assert m["ppo_kl"].item() == pytest.approx(-new.mean().item(), abs=1e-6)
    # Without the dual clip token 3 keeps its 5 and nothing counts as clipped below.
    loss, m = policy_loss(old, new, adv, torch.ones(1, 4), clip_low=0.2, clip_high=0.2, clip_c=None)
    assert loss.item() == pytest.approx((-1.2 - 1.0 + 0.8 + 5.0) / 4, abs=1e-6)
    assert m["pg_clipfrac"].item() == pytest.approx(2 / 4)
    assert m["pg_clipfrac_lower"].item() == 0.0
    # A masked token counts in no metric: only tokens 0 and 3 are left.
    _, m = policy_loss(old, new, adv, torch.tensor([[1, 0, 0, 1]]), clip_low=0.2, clip_high=0.2, clip_c=3.0)
    assert m["pg_clipfrac"].item() == pytest.approx(1 / 2)
    assert m["pg_clipfrac_lower"].item() == pytest.approx(1 / 2)
    assert m["ppo_kl"].item() == pytest.approx(-(new[0, 0] + new[0, 3]).item() / 2, abs=1e-6)


def test_masked_tokens_get_no_policy_gradient():
    torch.manual_seed(0)
    new = torch.randn(2, 6, requires_grad=True)
    mask = torch.tensor([[1, 1, 0, 0, 1, 0], [0, 1, 1, 1, 0, 0]])
    loss, _ = policy_loss(torch.randn(2, 6), new, torch.randn(2, 6), mask)
    loss.backward()
    assert (new.grad[mask == 0] == 0).all()
    assert (new.grad[mask == 1] != 0).any()


def test_dual_clip_rejects_constant_below_one():
    with pytest.raises(ValueError, match="clip_c"):
        policy_loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), torch.ones(1, 1), clip_c=0.5)


def test_gspo_sequence_ratio_and_gradient():
    old = torch.tensor([[-1.0, -1.0, -1.0, -2.0]])
    new = torch.tensor([[-0.9, -1.1, -1.0, 5.0]], requires_grad=True)  # last token masked
    mask = torch.tensor([[1, 1, 1, 0]])
    adv = torch.ones(1, 4)
    loss, m = policy_loss_gspo(old, new, adv, mask, clip_low=0.5, clip_high=0.5)
    # mean log-ratio over policy tokens is 0 → s = 1, unclipped: loss = −A·s = −1 per token.
    assert loss.item() == pytest.approx(-1.0, abs=1e-6)
    loss.backward()
    assert new.grad[0, 3].item() == 0.0
    assert new.grad[0, :3].tolist() == pytest.approx([-1 / 3] * 3, abs=1e-6)
    assert m["pg_clipfrac"].item() == 0.0
    assert m["pg_clipfrac_lower"].item() == 0.0
    assert m["ppo_kl"].item() == pytest.approx((-0.1 + 0.1 + 0.0) / 3, abs=1e-6)  # mean log π_old − log π


def test_gspo_clips_whole_sequences():
    old = torch.zeros(2, 2)
    new = torch.tensor([[0.5, 0.5], [0.0, 0.0]])  # s = e^0.5 for row 0, 1 for row 1
    loss, m = policy_loss_gspo(old, new, torch.ones(2, 2), torch.ones(2, 2))
    assert m["pg_clipfrac"].item() == pytest.approx(0.5)
    assert m["pg_clipfrac_lower"].item() == 0.0  # the advantages are positive
    assert m["ppo_kl"].item() == pytest.approx(-1.0 / 4, abs=1e-6)
    assert loss.item() == pytest.approx((-(1 + 4e-4) - 1.0) / 2, abs=1e-6)
    # Negative advantages: row 0's s = e^−0.5 is clipped up to 1 − 3e-4 (a lower clip).
    loss, m = policy_loss_gspo(old, -new, -torch.ones(2, 2), torch.ones(2, 2))
    assert m["pg_clipfrac"].item() == pytest.approx(0.5)
    assert m["pg_clipfrac_lower"].item() == pytest.approx(0.5)
    assert m["ppo_kl"].item() == pytest.approx(1.0 / 4, abs=1e-6)
    assert loss.item() == pytest.approx(((1 - 3e-4) + 1.0) / 2, abs=1e-6)


def test_value_loss_hand_computed():
    vpreds = torch.tensor([[1.0, 0.0, 2.0]])
    values = torch.tensor([[0.0, 0.0, 2.0]])
    returns = torch.tensor([[0.0, 1.0, 2.5]])
    loss, clipfrac = value_loss(vpreds, returns, values, torch.ones(1, 3), clip=0.5)
    # token 0: unclipped (1−0)²=1, clipped (0.5−0)²=0.25 → max 1; token 1: 1 and 1 → 1;
    # token 2: (2−2.5)²=0.25 both → 0.25.  ½ · mean = ½ · 2.25/3.
    assert loss.item() == pytest.approx(0.5 * 2.25 / 3)
    assert clipfrac.item() == 0.0
    loss2, clipfrac2 = value_loss(
        torch.tensor([[1.0]]), torch.tensor([[2.0]]), torch.tensor([[0.0]]), torch.ones(1, 1)
    )
    assert loss2.item() == pytest.approx(0.5 * (0.5 - 2.0) ** 2)  # clipped prediction 0.5 is further away
    assert clipfrac2.item() == 1.0
    loss3, _ = value_loss(
        torch.tensor([[1.0]]), torch.tensor([[2.0]]), torch.tensor([[0.0]]), torch.ones(1, 1), clip=None
    )
    assert loss3.item() == pytest.approx(0.5)
    # Two tokens of three clipped: for tokens 0 and 1 the clipped prediction 0.5 is further from 2
    # than 1 is ((0.5−2)² = 2.25 > 1); for token 2 it is nearer to 0 ((0.5−0)² = 0.25 < 1).
    loss4, clipfrac4 = value_loss(
        torch.ones(1, 3), torch.tensor([[2.0, 2.0, 0.0]]), torch.zeros(1, 3), torch.ones(1, 3)
    )
    assert clipfrac4.item() == pytest.approx(2 / 3)
    assert loss4.item() == pytest.approx(0.5 * (2.25 + 2.25 + 1.0) / 3)


def test_entropy_matches_torch_distributions():
    logits = torch.randn(3, 5, 11, generator=torch.Generator().manual_seed(1))
    ref = torch.distributions.Categorical(logits=logits).entropy()
    assert torch.allclose(entropy_from_logits(logits), ref, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_logprobs_from_logits(dtype):
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(2, 7, 50, generator=g).to(dtype)
    labels = torch.randint(0, 50, (2, 7), generator=g)
    ref = torch.log_softmax(logits.float(), -1).gather(-1, labels[..., None]).squeeze(-1)
    got = logprobs_from_logits(logits, labels)
    assert got.dtype == torch.float32
    assert torch.allclose(got, ref, atol=1e-5)
