"""Reading a chat server's reply the way each server family writes it: TITO data and context overflow.

Token ids, in the order they are looked for (the first found wins; ids are never guessed):

- ``choice["token_ids"]``: vLLM (≥ 0.10.2) and SGLang when the request asks ``return_token_ids``;
- an integer ``token_id`` or ``id`` in every log-prob entry (llama.cpp's ``llama-server`` puts the
  sampled token's ``id`` there);
- a ``token_id:N`` token string in every log-prob entry (vLLM's ``return_tokens_as_token_ids``).

A reply with none of these (llama-cpp-python, Ollama, LM Studio, hosted APIs) leaves the turn
without ``token_ids`` and so without ``logprobs`` (the trajectory schema keeps log-probs only next
to the ids they belong to): the expander retokenizes such a turn for training, and
token-in-token-out is not guaranteed for it. ``note_no_token_ids`` says so once per policy.

A server says the conversation no longer fits its context in words of its own: OpenAI's code
``context_length_exceeded``, vLLM's "maximum context length", llama.cpp's
``exceed_context_size_error`` (HTTP 400, or 500 in some builds), SGLang's "longer than the model's
context length", LM Studio's "context length of only" or "greater than the context length".
``is_context_overflow`` reads them; the policy raises ``ContextOverflow`` and the episode loop ends
the episode as truncated. (Ollama mostly cuts the prompt to fit instead, and says nothing.)
"""

from __future__ import annotations

import logging
import math
import re
from typing import Any

__all__ = [
    "CONTEXT_OVERFLOW",
    "NO_TOKEN_IDS_NOTE",
    "PROMPT_IDS",
    "ContextOverflow",
    "is_context_overflow",
    "note_no_token_ids",
    "read_tito",
]

#: The ``truncated_reason`` of an episode whose conversation outgrew the server's context.
CONTEXT_OVERFLOW = "context_length_exceeded"

#: The extra field of a returned assistant message holding the prompt ids the server fed for it.
PROMPT_IDS = "prompt_token_ids"

NO_TOKEN_IDS_NOTE = (
    "turns without token ids are retokenized by the expander for training, so token-in-token-out "
    "is not guaranteed for them (docs/local-servers.md says which servers return ids)"
)

_TOKEN_ID = re.compile(r"^token_id:(\d+)$")
_OVERFLOW_MARKERS = (
    "context_length_exceeded",  # OpenAI's error code, also llama-cpp-python's
    "exceed_context_size_error",  # llama.cpp's error type
    "maximum context length",  # OpenAI, vLLM, llama-cpp-python
    "context size has been exceeded",  # llama.cpp (HTTP 500 in some builds)
    "exceeds the available context size",  # llama.cpp
    "longer than the model's context length",  # SGLang
    "longer than the maximum model length",  # vLLM (decoder prompt)
    "too long to fit into the model",  # vLLM (prompt)
    "context length of only",  # LM Studio ("... loaded with (a) context length of only N tokens")
)
# The same idea in other words: "... exceeds the context window", "exceed context window of N", ...
_OVERFLOW_WORDS = re.compile(
    r"(exceed\w*|too long|longer than|greater than|overflow\w*)\W+(?:\w+\W+){0,4}?context[ _-]?(length|size|window)"
)
_log = logging.getLogger("agentrl.policy")


class ContextOverflow(RuntimeError):
    """The server refused the turn because the conversation no longer fits its context window:
    the episode ends truncated (``CONTEXT_OVERFLOW``), its trajectory is written, nothing is retried."""


def is_context_overflow(text: str) -> bool:
    """True when an error body or message says the request exceeds the model's context."""
    low = text.lower()
    return any(m in low for m in _OVERFLOW_MARKERS) or bool(_OVERFLOW_WORDS.search(low))


def _entry_id(entry: dict[str, Any]) -> int | None:
    for key in ("token_id", "id"):
        value = entry.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    m = _TOKEN_ID.match(str(entry.get("token", "")))
    return int(m.group(1)) if m else None


def read_tito(choice: dict[str, Any]) -> tuple[list[int] | None, list[float] | None]:
    """The sampled ``token_ids`` ``[T]`` and their ``logprobs`` ``[T]`` of one chat-completion choice.

    ``(None, None)`` when the server gave no ids; logprobs are None when it gave none, not one per
    id (a count that disagrees is never stored), or one that is not finite (a sampled token has a
    probability above 0; a trajectory is strict JSON, and the trainer recomputes unknown log-probs).
    """
    content = ((choice.get("logprobs") or {}).get("content")) or []
    logprobs = [float(c.get("logprob", 0.0)) for c in content] or None
    if logprobs is not None and not all(math.isfinite(x) for x in logprobs):
        logprobs = None
    ids: list[int] | None = None
    if choice.get("token_ids"):
        ids = [int(i) for i in choice["token_ids"]]
    elif content:
        per_entry = [_entry_id(c) for c in content]
        ids = None if any(i is None for i in per_entry) else per_entry  # type: ignore[assignment]
    if ids is None:
        return None, None
    if logprobs is not None and len(logprobs) != len(ids):
        logprobs = None
    return ids, logprobs


def note_no_token_ids(policy: str, why: str) -> None:
    """The one-line note a policy logs at its first turn without token ids."""
    _log.warning("note: %s: %s; %s.", policy, why, NO_TOKEN_IDS_NOTE)
