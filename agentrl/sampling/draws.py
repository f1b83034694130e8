"""The sampler's randomness: Gumbel noise from a counter-based hash of (row seed, position, token).

A row's ``t``-th sampled token is ``argmax(logp + g)`` (Gumbel-max: a draw from ``softmax(logp)``)
where ``g[j] = -log(-log(u))`` and ``u`` is a 32-bit hash of the row's seed, ``t`` and the token id
``j`` (``gumbel``), computed for the whole batch on the model's device in a few elementwise
kernels. So a row's tokens depend only on its seed, its prompt and the model, never on which rows
share the batch, how many tokens the call may sample, or when other rows stop; nothing crosses
from the host per token. Gumbel-max (and not inverse-CDF sampling, which needs one uniform per
token) because it is robust to float noise in the logits: a different batch composition changes a
logit by ~1e-5, and inverse-CDF then picks a neighbouring id in the distribution's long tail about
once in 400 tokens (measured on SmolLM2-135M), where Gumbel-max flips only on a near-tie of the
two best perturbed scores.

The hash (three xorshift-multiply rounds on 32-bit words, in int64 arithmetic so that no
operation overflows) gives the same bits on every device. This replaced per-row
``torch.Generator`` draws: a seed's sampled ids changed once (``docs/training.md``, "Changes to what
a run holds").
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["GumbelNoise", "gumbel", "row_keys", "token_keys"]

_M32 = 0xFFFFFFFF


def _mix_(x: torch.Tensor, tmp: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (xorshift-multiply rounds) of int64 values in ``[0, 2**32)``, written
    into ``x`` (``tmp``: scratch of its shape); every product stays below 2**63."""
    for shift, mul in ((16, 0x7FEB352D), (15, 0x31848BAB)):
        x ^= torch.bitwise_right_shift(x, shift, out=tmp)
        x.mul_(mul).bitwise_and_(_M32)
    x ^= torch.bitwise_right_shift(x, 14, out=tmp)
    return x


def _mix(x: torch.Tensor) -> torch.Tensor:
    """``_mix_`` on a copy of ``x``."""
    return _mix_(x.clone(), torch.empty_like(x))


def row_keys(seeds: Sequence[int], device: torch.device | str = "cpu") -> torch.Tensor:
    """One 32-bit key per row from its seed (any int; taken modulo 2**64), as int64 on ``device``."""
    words = [(int(s) % 2**64) for s in seeds]
    lo = torch.tensor([w & _M32 for w in words], dtype=torch.long, device=device)
    hi = torch.tensor([w >> 32 for w in words], dtype=torch.long, device=device)
    return _mix(lo ^ _mix(hi ^ 0x5BD1E995))


def token_keys(vocab: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """One hashed 32-bit key per token id ``[vocab]`` (int64): made once per sampling call."""
    return _mix((torch.arange(vocab, dtype=torch.long, device=device) * 0x85EBCA6B + 0x27D4EB2F) & _M32)


def gumbel(keys: torch.Tensor, t: int, ids: torch.Tensor) -> torch.Tensor:
    """Gumbel noise ``[B, V]`` (float32) for position ``t`` of rows with ``keys`` ``[B]`` over tokens
    with keys ``ids`` ``[V]`` (``token_keys``): ``-log(-log(u))`` with ``u = (h + 0.5) / 2**23``, ``h``
    the top 23 bits of a hash of (row key, t, token key), so ``u`` is never 0 or 1 in float32."""
    return GumbelNoise(keys, ids)(t)


class GumbelNoise:
    """``gumbel`` for one sampling call, in buffers allocated once: each position's noise is written
    in place (a fresh ``[B, V]`` tensor per elementwise step cost SmolLM2's 49k-id rows more than the
    arithmetic). The tensor returned is overwritten by the next call. ``select(index)`` keeps the
    rows at ``index`` (rows that finished left the batch)."""

    def __init__(self, keys: torch.Tensor, ids: torch.Tensor) -> None:
        self.keys, self.ids = keys, ids
        shape = (keys.shape[0], ids.shape[0])
        self._x = torch.empty(shape, dtype=torch.long, device=ids.device)
        self._tmp = torch.empty(shape, dtype=torch.long, device=ids.device)
        self._u = torch.empty(shape, dtype=torch.float32, device=ids.device)

    def select(self, index: torch.Tensor) -> None:
        self.keys = self.keys[index]

    def __call__(self, t: int) -> torch.Tensor:
        b = self.keys.shape[0]
        x, tmp, u = self._x[:b], self._tmp[:b], self._u[:b]
        step = _mix(self.keys ^ ((t * 0x9E3779B1 + 0x7F4A7C15) & _M32))  # [B]
        torch.bitwise_xor(step[:, None], self.ids[None, :], out=x)
        u.copy_(_mix_(x, tmp).bitwise_right_shift_(9)).add_(0.5).mul_(1.0 / 2**23)
        return u.log_().neg_().log_().neg_()
