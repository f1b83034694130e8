"""A KV cache allocated once per sampling call: full-attention layers that write in place.

transformers' ``DynamicLayer`` concatenates every decoded token's keys and values onto the whole
cache (a copy of all of it, per layer and per token). ``preallocate`` turns each full-attention
layer of a cache returned by a prefill into a ``PreallocatedLayer`` with room for the tokens the
call may still decode: each step writes one column into the buffer and hands the model a view of
the filled part, so decoding costs the model's own arithmetic. The layer is still a
``DynamicLayer`` to the model (its mask and length are computed the same way), and
``batch_select_indices`` drops finished rows from the buffers.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import DynamicLayer

__all__ = ["PreallocatedLayer", "preallocate"]


class PreallocatedLayer(DynamicLayer):
    """A full-attention layer over buffers ``[B, kv_heads, capacity, head_dim]``; ``keys`` and
    ``values`` are views of the first ``length`` columns. Grows (doubling) if asked to hold more."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, capacity: int) -> None:
        super().__init__()
        self.device = keys.device
        self._k = self._buffer(keys, capacity)
        self._v = self._buffer(values, capacity)
        self.length = keys.shape[-2]
        self.is_initialized = True
        self._views()

    @staticmethod
    def _buffer(x: torch.Tensor, capacity: int) -> torch.Tensor:
        buf = x.new_empty(x.shape[0], x.shape[1], max(capacity, x.shape[-2]), x.shape[-1])
        buf[:, :, : x.shape[-2]] = x
        return buf

    def _views(self) -> None:
        self.keys = self._k[:, :, : self.length]
        self.values = self._v[:, :, : self.length]

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        end = self.length + key_states.shape[-2]
        if end > self._k.shape[-2]:
            self._k = self._buffer(self.keys, 2 * end)
            self._v = self._buffer(self.values, 2 * end)
        self._k[:, :, self.length : end] = key_states
        self._v[:, :, self.length : end] = value_states
        self.length = end
        self._views()
        return self.keys, self.values

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError("crop takes a negative count (tokens to remove from the end)")
        self.length = max(0, self.length + tokens_to_remove)
        self._views()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._k, self._v = self._k[indices], self._v[indices]
        self._views()

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._k = self._k.repeat_interleave(repeats, dim=0)
        self._v = self._v.repeat_interleave(repeats, dim=0)
        self._views()

    def reset(self) -> None:
        self.length = 0
        self._views()


def preallocate(cache: Any, extra: int) -> bool:
    """Give every layer of ``cache`` (a transformers ``DynamicCache`` after a prefill) room for
    ``extra`` more tokens, in place. Only when all its layers are plain full attention
    (``DynamicLayer``); returns whether it did (a sliding-window or state-space cache is left as is)."""
    layers = getattr(cache, "layers", None)
    if not layers or any(type(layer) is not DynamicLayer or not layer.is_initialized for layer in layers):
        return False
    cache.layers = [
        PreallocatedLayer(layer.keys, layer.values, layer.keys.shape[-2] + extra) for layer in layers
    ]
    return True
