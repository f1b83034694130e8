"""Token log-probabilities from model logits, aligned with the expander's arrays.

The model's output at position t-1 predicts token t, so ``log p(token t) = log_softmax(logits[t-1])
[input_ids[t]]``; token 0 has no prediction and gets 0. This is the one place that shift lives.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["token_logprobs"]


def token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """``logits`` ``[B, T, V]`` and ``input_ids`` ``[B, T]`` → float32 ``[B, T]`` with
    ``out[:, t] = log p(input_ids[:, t] | tokens < t)`` and ``out[:, 0] = 0``, comparable with
    ``old_logprobs`` under ``loss_mask``."""
    import torch

    from agentrl.algos import logprobs_from_logits

    picked = logprobs_from_logits(logits[:, :-1], input_ids[:, 1:]).float()
    # Token 0's zero is built whole: ``zeros_like(picked[:, :1])`` has no column for a 1-token row.
    first = torch.zeros(picked.shape[0], 1, dtype=picked.dtype, device=picked.device)
    return torch.cat([first, picked], dim=1)
