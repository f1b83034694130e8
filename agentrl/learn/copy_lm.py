"""A small causal LM with a copy head: each next-token distribution is a mixture of the LM head's
softmax and a pointer over the tokens already in the context (a pointer-generator, See et al.
2017), so a name, a URL or a figure that a tool result printed can be repeated by pointing at it.

Why: a tiny model trained from scratch in minutes learns to *recall* what its training companies'
pages said rather than to copy what the current page says (issue 36: held-out 0.000). Copying through
the vocabulary needs the model to rebuild a token from its embedding; a pointer needs only to find the
right place, the skill an induction head has, and it works the same for a token the model never saw
trained. The mixture is a distribution over the vocabulary, returned as its logarithm in ``logits``:
the sampler and the trainer compute log-probabilities from it exactly as from any causal LM, so the
tokens sampled and the tokens trained on stay the same (TITO) and the rest of agentrl needs no change.

``p(x | h_t) = (1 − g_t) · softmax(W h_t) + g_t · Σ_{j ≤ t, x_j = x} a_tj``, with ``a_t = softmax(q_t ·
K / √d)`` over the visible positions ``j`` (``q_t = Q h_t``, ``k_j = K h_j``) and ``g_t = σ(G h_t)``.
The pointer's keys and the ids they point at live in one extra layer of the model's KV cache (the
ids as float32 values), so prefix caching, dropping finished rows and preallocation in the sampler
treat it as they treat the attention layers.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import torch
from torch import nn
from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen2Model
from transformers.cache_utils import DynamicLayer
from transformers.modeling_outputs import CausalLMOutputWithPast

__all__ = ["CopyConfig", "CopyForCausalLM"]

# The pointer puts no mass on a token absent from the context; in log space that is this floor
# (e^-69 ≈ 1e-30), which keeps log and its gradient finite. Sampler and trainer see the same value.
_LOG_FLOOR = -69.0

# The initial weight of each id matched in a position's pointer score (learned): e^3 ≈ 20 times the
# attention for every id of the match, so copying a continuation is the pointer's first guess.
_MATCH_INIT = 3.0

# The name transformers gives the KV cache, in the backbone's arguments and in its outputs: ``cache``
# from transformers 5.2x on, ``past_key_values`` before.
_CACHE = "cache" if "cache" in inspect.signature(Qwen2Model.forward).parameters else "past_key_values"


class CopyConfig(Qwen2Config):
    """Qwen2's configuration plus the copy head's sizes: ``copy_dim`` (its queries and keys) and
    ``copy_match`` (the longest run of matching ids it counts)."""

    model_type = "agentrl_copy"

    def __init__(self, copy_dim: int = 64, copy_match: int = 8, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.copy_dim, self.copy_match = copy_dim, copy_match


class _MatchBonus(torch.autograd.Function):
    """``bonus[..] = Σ_{i < L[..]} w_i`` for match lengths ``L`` (uint8): keeps ``L`` (a byte a pair of
    positions) for backward instead of the long index or the float masks autograd would keep."""

    @staticmethod
    def forward(ctx, lengths, weights):  # type: ignore[no-untyped-def]
        table = torch.cat([weights.new_zeros(1), weights.cumsum(0)])
        ctx.save_for_backward(lengths)
        ctx.n = weights.shape[0]
        return table[lengths.long()]

    @staticmethod
    def backward(ctx, grad):  # type: ignore[no-untyped-def]
        (lengths,) = ctx.saved_tensors
        return None, torch.stack([(grad * (lengths > i)).sum() for i in range(ctx.n)])


class CopyForCausalLM(Qwen2ForCausalLM):
    """Qwen2 with a copy head (see the module's docstring). ``logits`` are log-probabilities."""

    config_class = CopyConfig
    #: forward_logprobs runs the whole model (the head is not a linear map of the last hidden state).
    agentrl_whole_forward = True

    def __init__(self, config: CopyConfig) -> None:
        super().__init__(config)
        h, d = config.hidden_size, config.copy_dim
        self.copy_query = nn.Linear(h, d, bias=False)
        self.copy_key = nn.Linear(h, d, bias=False)
        self.copy_gate = nn.Linear(h, 1)
        self.copy_match = nn.Parameter(torch.full((config.copy_match,), _MATCH_INIT))
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if module is self:  # a build on the meta device, or weights missing from a checkpoint
            with torch.no_grad():
                self.copy_match.fill_(_MATCH_INIT)

    def forward(  # type: ignore[override]
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values: Any = None,
        cache: Any = None,
        use_cache: bool | None = None,
        logits_to_keep: int = 0,
        labels: torch.Tensor | None = None,
        logits_at: tuple[torch.Tensor, torch.Tensor] | None = None,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast:
        """As any causal LM's, and with ``logits_at`` = (rows, positions) ([N] each, no cache): the
        logits [N, V] after those positions alone (the trainer's policy tokens): the pointer's keys
        span each row, its queries and the [·, V] mixture only the positions asked for."""
        if input_ids is None:
            raise ValueError("the copy head points at token ids: call it with input_ids")
        if logits_at is not None:
            return self._logits_at(input_ids, attention_mask, position_ids, *logits_at, **kwargs)
        past = cache if cache is not None else past_key_values
        before = self._cached(past)
        out = self.model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
            use_cache=use_cache, **{_CACHE: past}, **kwargs,
        )  # fmt: skip
        hidden = out.last_hidden_state
        past = out[_CACHE] if use_cache else None
        n = hidden.shape[1]
        if position_ids is None:
            start = 0 if before is None else before.shape[1]
            position_ids = torch.arange(start, start + n, device=hidden.device)[None]
        history = _history(
            input_ids, position_ids.expand_as(input_ids), attention_mask, before, self.config.copy_match
        )
        keys, histories = self._pointed(hidden, history, past)
        keep = slice(-logits_to_keep, None) if logits_to_keep else slice(None)
        packed = position_ids.expand_as(input_ids) if before is None else None
        visible = _visible(attention_mask, n, keys.shape[1], hidden.device, packed)[:, keep]
        logits = self._mixture(hidden[:, keep], history[:, keep], keys, histories, visible)
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(
                logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100
            )
        return CausalLMOutputWithPast(
            loss=loss,
            logits=logits,
            hidden_states=out.hidden_states,
            attentions=out.attentions,
            **{_CACHE: past},
        )

    def _logits_at(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        position_ids: torch.Tensor | None,
        rows: torch.Tensor,
        cols: torch.Tensor,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast:
        hidden = self.model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
            use_cache=False, **kwargs,
        ).last_hidden_state  # fmt: skip
        n = hidden.shape[1]
        if position_ids is None:
            position_ids = torch.arange(n, device=hidden.device)[None]
        pos = position_ids.expand_as(input_ids)
        history = _history(input_ids, pos, attention_mask, None, self.config.copy_match)
        keys = self.copy_key(hidden)
        visible = _visible(attention_mask, n, n, hidden.device, pos)
        order = torch.argsort(rows, stable=True)  # the wanted positions, row by row
        logits, start = [], 0
        for r, count in zip(*torch.unique_consecutive(rows[order], return_counts=True), strict=True):
            c = cols[order[start : start + int(count)]]
            start += int(count)
            v = visible[int(r) if visible.shape[0] > 1 else 0]
            logits.append(
                self._mixture(
                    hidden[r, c][None], history[r, c][None], keys[r][None], history[r][None], v[c][None]
                )[0]
            )
        # no position wanted (a micro-batch whose policy tokens are all masked): [0, V], still on the
        # graph, so a loss of nothing backpropagates zeros as the whole pass does
        out = torch.cat(logits) if logits else self.lm_head(hidden[0, :0]).float()
        return CausalLMOutputWithPast(logits=out[torch.argsort(order)])

    def _cached(self, past: Any) -> torch.Tensor | None:
        """The id histories ([B, S, copy_match + 1]) a cache holds before this call, or None."""
        layers = getattr(past, "layers", None)
        layer = self.config.num_hidden_layers
        if layers is None or len(layers) <= layer or not getattr(layers[layer], "is_initialized", False):
            return None
        values = layers[layer].values
        return None if values is None or values.shape[-2] == 0 else values[:, 0].round().long()

    def _pointed(
        self, hidden: torch.Tensor, history: torch.Tensor, past: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys of every position visible to this call ([B, S, d]) and their id histories ([B, S,
        copy_match + 1]): this call's alone, or with a cache, the cached ones and this call's (then
        cached too: the ids as float32 values of one more cache layer)."""
        keys = self.copy_key(hidden)
        if past is None:
            return keys, history
        layer = self.config.num_hidden_layers
        while len(past.layers) <= layer:
            past.layers.append(DynamicLayer())
        k, v = past.layers[layer].update(keys[:, None], history[:, None].to(torch.float32))
        return k[:, 0], v[:, 0].round().long()

    def _mixture(
        self,
        h: torch.Tensor,
        history: torch.Tensor,
        keys: torch.Tensor,
        histories: torch.Tensor,
        visible: torch.Tensor,
    ) -> torch.Tensor:
        """log((1 − g)·softmax(W h) + g·pointer) for hidden states ``h`` [B, n, H], float32 [B, n, V].
        The pointer's score of position j for the query at t: q_t·k_j/√d plus Σ_{i < L} w_i, where L is
        how many ids before j equal the ids ending at t (an induction match, on ids: the same for a
        token the model never trained on)."""
        gen = torch.log_softmax(self.lm_head(h).float(), dim=-1)
        q = self.copy_query(h)
        # float32 scores: a decode step and a full pass round alike under bf16 autocast
        scores = (q.float() @ keys.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
        lengths = _match_lengths(history, histories).masked_fill_(~visible, 0)
        scores = scores + _MatchBonus.apply(lengths, self.copy_match.float())
        attn = torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)
        attn = torch.nan_to_num(attn, nan=0.0)  # a padding query sees nothing
        ids = histories[..., 0].clamp(min=0)
        pointer = torch.zeros_like(gen).scatter_add_(-1, ids[:, None, :].expand(-1, h.shape[1], -1), attn)
        g = self.copy_gate(h).float()
        copy = nn.functional.logsigmoid(g) + pointer.clamp_min(1e-30).log().clamp_min(_LOG_FLOOR)
        return torch.logaddexp(nn.functional.logsigmoid(-g) + gen, copy)


def _history(
    ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor | None, before: torch.Tensor | None, n: int
) -> torch.Tensor:
    """[B, T, n + 1]: at each new position t, the ids x_t, x_{t−1}, …, x_{t−n} (−1 before the row's
    first token). A row's tokens are contiguous in this call (after left padding, before right
    padding, or packed: positions restart at 0 per row); the ones before them are in ``before``'s last
    column (the cached history of the row's last cached token), when the row's first position here
    is past 0."""
    B, T = ids.shape
    back = torch.arange(n + 1, device=ids.device)
    if before is None:
        run = pos  # no cache: a row starts at position 0
    else:
        new = (
            mask[:, -T:].bool()
            if mask is not None and mask.dim() == 2
            else torch.ones_like(ids, dtype=torch.bool)
        )
        first = torch.where(new, pos, torch.full_like(pos, torch.iinfo(torch.long).max)).min(-1).values
        run = pos - first[:, None]  # how many of the row's tokens precede t in this call
    src = torch.arange(T, device=ids.device)[:, None] - back[None, :]  # [T, n + 1]
    within = (back <= run[..., None]) & (src >= 0)
    out = torch.where(within, ids[:, src.clamp(min=0)], torch.full((), -1, device=ids.device))
    if before is not None:
        last = before[:, -1]  # [B, n + 1]: x_c, x_{c−1}, …
        cached = ~within & (back <= pos[..., None])
        idx = (back - run[..., None] - 1).clamp(0, n)
        out = torch.where(cached, last.gather(1, idx.reshape(B, -1)).reshape(B, T, n + 1), out)
    return out


def _visible(
    mask: torch.Tensor | None, n: int, s: int, device: torch.device, positions: torch.Tensor | None = None
) -> torch.Tensor:
    """[B or 1, n, s] bool: which of the ``s`` key positions each of the ``n`` new positions may point
    at. A 2D padding mask [B, s] (the last ``n`` columns are the new tokens) with causality; a 4D
    mask [B, 1, n, s] as the attention layers take it (bool: True visible; float: 0 visible); None:
    causal, and with ``positions`` (a call without a cache) each row of a line packed by position ids
    alone (FlashAttention: they restart at 0 per row) sees only itself."""
    if mask is not None and mask.dim() == 4:
        m = mask[:, 0]
        return m if m.dtype == torch.bool else m == 0
    causal = torch.ones(n, s, dtype=torch.bool, device=device).tril(s - n)[None]
    if mask is not None:
        return causal & mask.bool()[:, None, :]
    if positions is None:
        return causal
    row = (positions == 0).cumsum(-1)
    return causal & (row[:, :, None] == row[:, None, :])


def _match_lengths(history: torch.Tensor, histories: torch.Tensor) -> torch.Tensor:
    """[B, n, S] uint8: for query t and key j, how many ids before j (x_{j−1}, x_{j−2}, …) equal the ids
    ending at t (x_t, x_{t−1}, …), up to ``copy_match``."""
    q = history[..., :-1].masked_fill(history[..., :-1] < 0, -2)  # a missing id matches nothing
    k = histories[..., 1:]
    length = torch.zeros(q.shape[0], q.shape[1], k.shape[1], dtype=torch.uint8, device=q.device)
    run = torch.ones_like(length, dtype=torch.bool)
    for i in range(q.shape[-1]):
        run &= q[:, :, None, i] == k[:, None, :, i]
        length += run
    return length


def _register() -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        AutoConfig.register(CopyConfig.model_type, CopyConfig)
        AutoModelForCausalLM.register(CopyConfig, CopyForCausalLM)
    except ValueError:  # registered already (a reload)
        pass


_register()
