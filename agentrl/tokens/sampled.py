"""One sampled assistant turn as a ``Message`` that keeps exactly what the engine sampled (TITO)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from agentrl.trajectory import Message

__all__ = ["sampled_message"]


def sampled_message(
    tokenizer: Any,
    token_ids: Sequence[int],
    logprobs: Sequence[float] | None,
    finish_reason: str | None,
    stop_ids: Collection[int],
) -> Message:
    """The assistant ``Message`` of one sampled turn: ``token_ids`` and ``logprobs`` as sampled (the
    stop token included when one was sampled), ``content`` the decoded text without the stop token.
    Every engine's rollout (the trainer's sampler, vLLM, verl/TRL/SkyRL) builds its turns here, so
    the expander sees the same message whichever engine sampled it."""
    ids = [int(t) for t in token_ids]
    text_ids = ids[:-1] if ids and ids[-1] in stop_ids else ids
    lps = None if logprobs is None else [float(x) for x in logprobs]
    if lps is not None and len(lps) != len(ids):
        raise ValueError(f"{len(lps)} logprobs for {len(ids)} sampled token ids")
    return Message(
        role="assistant",
        content=tokenizer.decode(text_ids, skip_special_tokens=False),
        token_ids=ids,
        logprobs=lps,
        finish_reason=finish_reason,
    )
