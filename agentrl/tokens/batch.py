"""Batching rows for the trainer: ``collate`` pads, ``pack`` concatenates several rows per line.

Both return a dict of torch tensors named as the ``TokenizedTrajectory`` arrays. Padding values:
``input_ids`` → ``pad_token_id``, ``attention_mask``/``loss_mask``/``old_logprobs``/
``token_level_scores``/``position_ids`` → 0, ``turn_ids`` → -1.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np

from agentrl.tokens.arrays import TokenizedTrajectory

if TYPE_CHECKING:
    import torch

__all__ = ["ARRAY_FIELDS", "block_causal_mask", "collate", "pack"]

#: (name, numpy dtype, pad value) of every per-token array a batch carries.
ARRAY_FIELDS: tuple[tuple[str, type, float], ...] = (
    ("input_ids", np.int64, 0),
    ("attention_mask", np.int64, 0),
    ("position_ids", np.int64, 0),
    ("loss_mask", np.int64, 0),
    ("old_logprobs", np.float32, 0.0),
    ("token_level_scores", np.float32, 0.0),
    ("turn_ids", np.int64, -1),
)


def collate(
    batch: Sequence[TokenizedTrajectory],
    pad_to_multiple_of: int | None = None,
    *,
    pad_token_id: int = 0,
    padding_side: Literal["right", "left"] = "right",
) -> dict[str, torch.Tensor]:
    """Pad ``batch`` (B rows) to a common length T and stack into tensors.

    Returns ``input_ids``, ``attention_mask``, ``position_ids``, ``loss_mask``, ``turn_ids`` as int64
    ``[B, T]``, ``old_logprobs`` and ``token_level_scores`` as float32 ``[B, T]``, and ``prompt_len``
    as int64 ``[B]``. T is the longest row, rounded up to ``pad_to_multiple_of``. With
    ``padding_side="left"`` the pads come first and ``position_ids`` still count 0.. from each row's
    first real token, so logits match the unpadded row.
    """
    import torch

    if not batch:
        raise ValueError("collate needs at least one row")
    T = max(len(r) for r in batch)
    if pad_to_multiple_of:
        T = -(-T // pad_to_multiple_of) * pad_to_multiple_of
    out: dict[str, torch.Tensor] = {}
    for name, dtype, pad in ARRAY_FIELDS:
        fill = pad_token_id if name == "input_ids" else pad
        a = np.full((len(batch), T), fill, dtype=dtype)
        for i, r in enumerate(batch):
            n = len(r)
            if padding_side == "right":
                a[i, :n] = getattr(r, name)
            else:
                a[i, T - n :] = getattr(r, name)
        out[name] = torch.from_numpy(a)
    out["prompt_len"] = torch.tensor([r.prompt_len for r in batch], dtype=torch.int64)
    return out


def pack(
    batch: Sequence[TokenizedTrajectory], max_tokens: int, *, pad_token_id: int = 0
) -> dict[str, torch.Tensor]:
    """Pack rows into R lines of ``max_tokens`` tokens (first-fit by decreasing length).

    Returns the ``collate`` arrays as ``[R, max_tokens]`` with ``position_ids`` restarting at 0 for
    each row, plus ``sequence_ids`` int64 ``[R, max_tokens]`` (index of the row in ``batch``, -1 on
    padding) for attention masking (``block_causal_mask``) and for mapping results back. A row
    longer than ``max_tokens`` is an error: cut rows with ``Expander(max_len=...)`` first.
    """
    import torch

    if not batch:
        raise ValueError("pack needs at least one row")
    too_long = [i for i, r in enumerate(batch) if len(r) > max_tokens]
    if too_long:
        raise ValueError(
            f"rows {too_long[:5]} are longer than max_tokens={max_tokens}; expand with max_len<={max_tokens}"
        )
    order = sorted(range(len(batch)), key=lambda i: -len(batch[i]))
    lines: list[list[int]] = []
    free: list[int] = []
    for i in order:
        n = len(batch[i])
        j = next((k for k, f in enumerate(free) if f >= n), None)
        if j is None:
            lines.append([i])
            free.append(max_tokens - n)
        else:
            lines[j].append(i)
            free[j] -= n
    out: dict[str, torch.Tensor] = {}
    seq = np.full((len(lines), max_tokens), -1, dtype=np.int64)
    arrays = {
        name: np.full((len(lines), max_tokens), pad_token_id if name == "input_ids" else pad, dtype=dtype)
        for name, dtype, pad in ARRAY_FIELDS
    }
    for li, rows in enumerate(lines):
        pos = 0
        for i in sorted(rows):  # keep batch order inside a line
            r = batch[i]
            n = len(r)
            for name, _, _ in ARRAY_FIELDS:
                arrays[name][li, pos : pos + n] = getattr(r, name)
            seq[li, pos : pos + n] = i
            pos += n
    for name, _, _ in ARRAY_FIELDS:
        out[name] = torch.from_numpy(arrays[name])
    out["sequence_ids"] = torch.from_numpy(seq)
    return out


def block_causal_mask(sequence_ids: torch.Tensor) -> torch.Tensor:
    """``[R, T]`` sequence ids → ``[R, 1, T, T]`` bool mask: token t attends to token s iff s ≤ t and
    both belong to the same packed row (padding attends only to itself, to avoid NaNs)."""
    import torch

    T = sequence_ids.shape[-1]
    same = sequence_ids[:, :, None] == sequence_ids[:, None, :]
    causal = torch.ones(T, T, dtype=torch.bool, device=sequence_ids.device).tril()
    pad_self = torch.eye(T, dtype=torch.bool, device=sequence_ids.device) & (sequence_ids[:, :, None] < 0)
    return ((same & causal & (sequence_ids[:, :, None] >= 0)) | pad_self)[:, None]
