"""The sampler's noise (``agentrl.sampling.draws``): pinned bits, a row's noise from its own seed
and position only, and draws with the distribution they claim."""

from __future__ import annotations

import pytest
import torch

from agentrl.sampling.draws import gumbel, row_keys, token_keys
from agentrl.sampling.generate import _process

#: The noise of seeds 0, 2**70 + 5 and -1 at position 3 over ids 0..3. A change here changes every
#: sampled id of every seed: it is a run-format change (docs/run-format.md), not a refactor.
PINNED = [
    [2.640867233276367, 0.6026628017425537, 0.6949930191040039, -1.174766182899475],
    [1.7315503358840942, -0.5658562183380127, -0.041364144533872604, 1.0993692874908447],
    [-0.39443108439445496, 0.3360916078090668, 1.3690217733383179, 0.7599896192550659],
]


def test_the_noise_bits_are_pinned():
    g = gumbel(row_keys([0, 2**70 + 5, -1]), 3, token_keys(4))
    assert g.tolist() == PINNED
    # a seed is taken modulo 2**64: -1 and 2**64 - 1 are one key
    assert row_keys([5, 2**64 + 5, -1, 2**64 - 1]).tolist() == [1619571204] * 2 + [3756336214] * 2


def test_a_rows_noise_depends_only_on_its_seed_and_position():
    keys, ids = row_keys([11, 12, 13, 14]), token_keys(300)
    full = gumbel(keys, 7, ids)
    assert torch.equal(gumbel(keys[[2]], 7, ids)[0], full[2])  # the batch around it does not matter
    assert torch.equal(gumbel(keys[[2, 0]], 7, ids), full[[2, 0]])
    assert not torch.equal(gumbel(keys, 8, ids), full)  # another position, other noise
    assert torch.equal(gumbel(keys, 7, token_keys(600))[:, :300], full)  # a larger vocabulary extends it


def test_the_noise_is_standard_gumbel_and_uncorrelated():
    keys, ids = row_keys(range(64)), token_keys(4096)
    g = torch.stack([gumbel(keys, t, ids) for t in range(8)]).double()  # [8, 64, 4096]
    n = g.numel()
    assert g.mean().item() == pytest.approx(0.5772, abs=4 * (1.645 / n) ** 0.5)
    assert g.var().item() == pytest.approx(1.6449, rel=0.01)
    u = torch.exp(-torch.exp(-g)).flatten()  # back to the uniforms
    counts = torch.histc(u, 50, 0, 1)
    expected = n / 50
    chi2 = (((counts - expected) ** 2) / expected).sum().item()
    assert chi2 < 100  # 49 degrees of freedom: p ~ 3e-5 above 100
    flat = g.reshape(8 * 64, 4096)
    corr = torch.corrcoef(flat[:64])  # rows at one position
    off = corr - torch.eye(64, dtype=corr.dtype)
    assert off.abs().max().item() < 0.08  # 4096 ids: |r| of independent rows ~ 0.016
    assert torch.corrcoef(torch.stack([flat[0], flat[64]]))[0, 1].abs().item() < 0.08  # positions


def test_gumbel_max_draws_from_the_processed_distribution():
    """Rows of one distribution, seeds 0..N: the frequencies are softmax(logits / T) (top-p cut)."""
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0]])
    for temperature, top_p in [(1.0, 1.0), (0.7, 1.0), (1.0, 0.8)]:
        logp = _process(logits, temperature, top_p)
        n = 20_000
        rows = logp.expand(n, -1)
        choice = (rows + gumbel(row_keys(range(n)), 0, token_keys(5))).argmax(-1)
        freq = torch.bincount(choice, minlength=5).double() / n
        p = logp[0].exp().double()
        assert torch.allclose(freq, p, atol=4 * (0.25 / n) ** 0.5), (temperature, top_p, freq, p)
        assert (freq[p == 0] == 0).all()  # a token the nucleus cut is never drawn
