"""Each episode's KV cache kept between its turns, so a turn prefills only its new tokens.

Token-in-token-out makes a turn's prompt the previous prompt, the sampled ids, then the new
observation's tokens, so the keys and values computed for the previous turn are those of a prefix
of the new prompt. ``EpisodeKVCache`` keeps them per episode (its trajectory id) and hands back the
part that is a prefix of the new prompt, checked on the ids: when the kept ids are not a prefix
(a template that rewrites history, a turn trimmed to its own limit), only their common prefix is
reused and the episode counts as a miss. Whatever is handed back is correct for the ids it covers
(a causal model's key and value at position ``j`` depend only on ids ``0..j``); the cache only
decides how much is recomputed.

Memory is bounded: at most ``max_tokens`` cached tokens in all; past that the least recently used
episodes are evicted. Episodes absent from a lock-step call have ended and are dropped
(``retain``). A cache holds keys and values of one set of weights: make a new one (or ``clear``)
after an update. Only models whose cache layers are all full attention (``DynamicLayer``) are
cached; for others (sliding windows, state-space layers) every turn is prefilled in full.
"""

from __future__ import annotations

import inspect
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import torch

__all__ = [
    "KV",
    "EpisodeKVCache",
    "PrefillStats",
    "cache_kwarg",
    "full_attention_kv",
    "returned_cache",
    "stack_left_padded",
]

# One episode's cache: per layer (keys, values), each [1, kv_heads, T, head_dim].
KV = list[tuple[torch.Tensor, torch.Tensor]]


@dataclass
class PrefillStats:
    """Tokens prefilled per turn: ``prompt`` (the prompts' lengths, what a full prefill runs) and
    ``prefilled`` (what ran through the model), each summed over a turn's episodes, by turn."""

    prompt: dict[int, int] = field(default_factory=dict)
    prefilled: dict[int, int] = field(default_factory=dict)
    rows: dict[int, int] = field(default_factory=dict)

    def add(self, turn: int, prompt_len: int, prefilled: int) -> None:
        self.prompt[turn] = self.prompt.get(turn, 0) + prompt_len
        self.prefilled[turn] = self.prefilled.get(turn, 0) + prefilled
        self.rows[turn] = self.rows.get(turn, 0) + 1


@dataclass
class _Entry:
    ids: list[int]
    kv: KV


class EpisodeKVCache:
    """Per-episode KV caches of one rollout (module docstring); ``max_tokens`` caps the total."""

    def __init__(self, max_tokens: int) -> None:
        if max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        self.max_tokens = max_tokens
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self.hits = 0  # turns that reused a cached prefix
        self.misses = 0  # turns whose episode's cached ids were not a prefix of the new prompt
        self.evicted = 0  # episodes dropped to stay under max_tokens
        self.reused_tokens = 0

    @property
    def tokens(self) -> int:
        """Cached tokens in all."""
        return sum(len(e.ids) for e in self._entries.values())

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def take(self, key: str, prompt: Sequence[int]) -> tuple[int, KV | None]:
        """Remove ``key``'s entry and return ``(n, kv)``: the keys and values of ``prompt[:n]``, the
        longest common prefix of the kept ids and ``prompt`` (at most ``len(prompt) - 1``: the last
        prompt token is always run, for its logits); ``(0, None)`` when nothing is reusable."""
        entry = self._entries.pop(key, None)
        if entry is None:
            return 0, None
        limit = min(len(entry.ids), len(prompt) - 1)
        n = 0
        while n < limit and entry.ids[n] == prompt[n]:
            n += 1
        if n < len(entry.ids):
            self.misses += 1
        if n == 0:
            return 0, None
        self.hits += 1
        self.reused_tokens += n
        return n, [(k[:, :, :n], v[:, :, :n]) for k, v in entry.kv]

    def put(self, key: str, ids: Sequence[int], kv: KV) -> None:
        """Keep ``kv`` (the keys and values of ``ids``) as ``key``'s entry, the most recently used;
        then evict the least recently used entries until at most ``max_tokens`` are cached."""
        self._entries.pop(key, None)
        if len(ids) > self.max_tokens:
            self.evicted += 1
            return
        # Clone: a slice would keep the whole batch's tensors alive.
        self._entries[key] = _Entry(list(ids), [(k.clone(), v.clone()) for k, v in kv])
        total = self.tokens
        while total > self.max_tokens:
            _, old = self._entries.popitem(last=False)
            total -= len(old.ids)
            self.evicted += 1

    def retain(self, keys: Iterable[str]) -> None:
        """Drop every entry whose key is not in ``keys`` (its episode has ended)."""
        keep = set(keys)
        for key in [k for k in self._entries if k not in keep]:
            del self._entries[key]

    def clear(self) -> None:
        """Drop every entry (after the weights change)."""
        self._entries.clear()


def _forward_params(model: object) -> Mapping[str, object]:
    """The parameters of the causal LM's own ``forward`` (through a peft or DDP wrapper, whose
    ``forward`` takes ``*args, **kwargs``)."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else getattr(model, "module", model)
    return inspect.signature(inner.forward).parameters  # type: ignore[attr-defined]


def cache_kwarg(model: object) -> str:
    """The name a model's ``forward`` takes its KV cache by: ``cache`` from transformers 5.2x on
    (where ``past_key_values`` warns on every call), ``past_key_values`` before."""
    params = _forward_params(model)
    return "cache" if "cache" in params and "past_key_values" not in params else "past_key_values"


def returned_cache(out: Mapping[str, object]) -> object:
    """The KV cache a forward pass returned: ``out.cache`` on transformers that renamed it,
    ``out.past_key_values`` before (read by key, so the renamed attribute's warning never fires)."""
    keys = list(out.keys())
    return out["cache"] if "cache" in keys else out["past_key_values"]


#: Full-attention layer types: transformers' own, and the sampler's preallocated one (``decode_cache``).
_FULL = ("DynamicLayer", "PreallocatedLayer")


def full_attention_kv(cache: object) -> KV | None:
    """The per-layer (keys, values) of a transformers cache whose layers are all full attention
    (``DynamicLayer``); None for any other kind of cache."""
    layers = getattr(cache, "layers", None)
    if not layers or any(type(layer).__name__ not in _FULL for layer in layers):
        return None
    return [(layer.keys, layer.values) for layer in layers]


def stack_left_padded(rows: Sequence[KV | None], width: int) -> KV:
    """Stack B single-row caches (None: nothing cached) of lengths ``T_i <= width`` into one batch
    cache ``[B, kv_heads, width, head_dim]`` per layer, each row right-aligned (zeros on its left)."""
    ref = next(kv for kv in rows if kv is not None)
    out: KV = []
    for layer, (k0, v0) in enumerate(ref):
        ks = k0.new_zeros(len(rows), k0.shape[1], width, k0.shape[3])
        vs = v0.new_zeros(len(rows), v0.shape[1], width, v0.shape[3])
        for i, kv in enumerate(rows):
            if kv is not None:
                k, v = kv[layer]
                ks[i, :, width - k.shape[2] :] = k[0]
                vs[i, :, width - v.shape[2] :] = v[0]
        out.append((ks, vs))
    return out
