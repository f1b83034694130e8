"""Forward passes over a batch of expanded trajectories: per-token log-probabilities (with entropy)
and critic values, optionally on packed rows, and the micro-batching that bounds their memory.

A batch is the dict of ``agentrl.tokens.collate`` ([B, T] tensors: ``input_ids``, ``attention_mask``,
``position_ids``, ``loss_mask``, ...). Outputs are [B, T] per-token tensors aligned with it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch import nn

from agentrl.algos import entropy_from_logits, logprobs_from_logits
from agentrl.learn.models import copy_head_of, forward_context, is_sharded
from agentrl.stopping import stop_point
from agentrl.tokens import token_logprobs

__all__ = [
    "LOGITS_CHUNK_TOKENS",
    "chunked_forward",
    "forward_logprobs",
    "forward_values",
    "micro_batches",
    "set_logits_chunk",
]

Batch = dict[str, torch.Tensor]


def _inputs(batch: Batch) -> dict[str, torch.Tensor]:
    return {k: batch[k] for k in ("input_ids", "attention_mask", "position_ids")}


def _attn_implementation(model: nn.Module) -> str:
    """The transformers attention implementation of ``model``, or of its first submodule that has a
    config (a critic's backbone); "" when none says."""
    for m in model.modules():
        impl = getattr(getattr(m, "config", None), "_attn_implementation", None)
        if impl:
            return str(impl)
    return ""


class _Packing:
    """Right-padded rows [n, w] packed into R ≤ n lines [R, C] (first-fit by decreasing length, C the
    longest row), with position ids restarting per row and a block-causal attention mask, so that
    each row attends only to itself. ``unpack`` maps per-token outputs back to the padded layout."""

    def __init__(self, batch: Batch, model: nn.Module) -> None:
        from agentrl.tokens import block_causal_mask

        lengths = batch["attention_mask"].sum(-1).tolist()
        self.shape = tuple(batch["input_ids"].shape)
        C = max(max(lengths), 1)
        lines: list[int] = []  # free space per line
        self.line, self.offset = [0] * len(lengths), [0] * len(lengths)
        for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
            j = next((k for k, free in enumerate(lines) if free >= lengths[i]), None)
            if j is None:
                lines.append(C)
                j = len(lines) - 1
            self.line[i], self.offset[i] = j, C - lines[j]
            lines[j] -= lengths[i]
        dev = batch["input_ids"].device
        ids = torch.zeros(len(lines), C, dtype=torch.long, device=dev)
        pos = torch.zeros_like(ids)
        seq = torch.full_like(ids, -1)
        for i, n in enumerate(lengths):
            a, b = self.offset[i], self.offset[i] + n
            ids[self.line[i], a:b] = batch["input_ids"][i, :n]
            pos[self.line[i], a:b] = torch.arange(n, device=dev)
            seq[self.line[i], a:b] = i
        self.lengths = torch.tensor(lengths, device=dev)
        # FlashAttention-2 finds the packed rows from the position ids; other kernels need the mask.
        impl = _attn_implementation(model)
        mask = None if impl == "flash_attention_2" else block_causal_mask(seq)
        if mask is not None and impl == "eager":
            # transformers passes a 4D mask through as it is, and eager attention adds it to the
            # scores: a bool mask would add 1 where it should block. Eager needs it additive.
            mask = torch.zeros(mask.shape, device=dev).masked_fill_(~mask, torch.finfo(torch.float32).min)
        self.inputs = {"input_ids": ids, "position_ids": pos, "attention_mask": mask}

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """[R, C] per-token outputs → [n, w]; 0 beyond each row's length and at its token 0 (a shifted
        output there would come from the previous row of the line)."""
        _, w = self.shape
        dev = x.device
        t = torch.arange(w, device=dev)
        cols = (torch.tensor(self.offset, device=dev)[:, None] + t).clamp(max=x.shape[1] - 1)
        out = x[torch.tensor(self.line, device=dev)[:, None], cols]
        keep = (t[None, :] < self.lengths[:, None]) & (t[None, :] > 0)
        return torch.where(keep, out, torch.zeros((), dtype=x.dtype, device=dev))


def _split_head(model: nn.Module) -> tuple[nn.Module, nn.Module] | None:
    """(backbone, LM head) of a transformers causal LM whose head may run on selected positions; None
    for a model whose forward must run whole (FSDP-sharded: its root's hooks gather the head, the
    embeddings and the final norm)."""
    if is_sharded(model) or copy_head_of(model):
        return None
    get_decoder = getattr(model, "get_decoder", None)
    get_head = getattr(model, "get_output_embeddings", None)
    if get_decoder is None or get_head is None:
        return None
    decoder, head = get_decoder(), get_head()
    return (decoder, head) if isinstance(decoder, nn.Module) and isinstance(head, nn.Module) else None


LOGITS_CHUNK_TOKENS = 256
"""Tokens per chunk of the LM head and log-softmax (``model.logits_chunk_tokens``'s default)."""

_CHUNK_ATTR = "_agentrl_logits_chunk_tokens"


def set_logits_chunk(model: nn.Module, tokens: int) -> None:
    """Make ``forward_logprobs`` on ``model`` (and on copies of it, such as the reference) run the LM
    head ``tokens`` positions at a time; 0 runs it on all the wanted positions at once."""
    setattr(model, _CHUNK_ATTR, int(tokens))


def forward_logprobs(
    model: nn.Module,
    batch: Batch,
    temperature: float = 1.0,
    with_entropy: bool = False,
    pack: bool = False,
    policy_only: bool = False,
    logits_chunk: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(token t | tokens < t) at temperature ``temperature``, and optionally the entropy of that
    distribution: ([B, T], [B, T] or None), 0 at t = 0 (the logits at t − 1 predict token t).
    ``pack`` runs the forward pass on the rows packed into fewer lines (same results, less padding).

    ``policy_only``: only the tokens under ``batch["loss_mask"]`` are wanted (0 elsewhere): the LM
    head and the log-softmax run on those positions alone, so the [B, T, V] logits of the whole
    batch are never built — the policy's turns are a small part of a multi-turn row, and the head's
    cost and memory grow with the vocabulary. Same values as the full pass (the backbone is the
    same; the head is a row-wise matmul). With a linear head, those positions go through it
    ``logits_chunk`` at a time, forward and backward (``agentrl.learn.chunked_head``), so no more
    than [logits_chunk, V] logits exist at once; None takes the model's setting
    (``set_logits_chunk``, else ``LOGITS_CHUNK_TOKENS``), 0 builds the [N, V] logits of the N wanted
    positions in one piece."""
    if policy_only and copy_head_of(model) and not is_sharded(model):
        return _copy_policy_logprobs(model, batch, temperature, with_entropy, pack)
    split = _split_head(model) if policy_only else None
    if split is not None:
        if logits_chunk is None:
            logits_chunk = getattr(model, _CHUNK_ATTR, LOGITS_CHUNK_TOKENS)
        return _policy_logprobs(model, split, batch, temperature, with_entropy, pack, logits_chunk)
    p = _Packing(batch, model) if pack else None
    inputs = p.inputs if p else _inputs(batch)
    with forward_context(model):
        logits = model(**inputs).logits
    if temperature != 1.0:
        logits = logits / temperature
    lp = token_logprobs(logits, inputs["input_ids"])
    ent = None
    if with_entropy:
        e = entropy_from_logits(logits[:, :-1].float())
        ent = torch.cat([torch.zeros(e.shape[0], 1, dtype=e.dtype, device=e.device), e], dim=1)
    if p is not None:
        lp, ent = p.unpack(lp), (None if ent is None else p.unpack(ent))
    return lp, ent


def _wanted(batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, cols) of the policy's tokens past each row's first, row-major (the order of ``lp[want]``)."""
    want = batch["loss_mask"].bool().clone()
    want[:, 0] = False  # token 0 has no prediction
    want &= batch["attention_mask"].bool()
    return want.nonzero(as_tuple=True)


def _inputs_at(
    batch: Batch, model: nn.Module, rows: torch.Tensor, cols: torch.Tensor, pack: bool
) -> tuple[Batch, torch.Tensor, torch.Tensor]:
    """The forward pass's inputs (packed or padded) and the (line, position) of the hidden state that
    predicts each wanted token (the one at t − 1)."""
    if not pack:
        return _inputs(batch), rows, cols - 1
    p = _Packing(batch, model)
    dev = batch["input_ids"].device
    line = torch.tensor(p.line, device=dev)[rows]
    return p.inputs, line, torch.tensor(p.offset, device=dev)[rows] + cols - 1


def _token_results(
    logits: torch.Tensor,
    batch: Batch,
    rows: torch.Tensor,
    cols: torch.Tensor,
    temperature: float,
    with_entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """[B, T] log-probs (and entropies) from the [N, V] logits of the wanted tokens."""
    ids = batch["input_ids"]
    if temperature != 1.0:
        logits = logits / temperature
    lp = torch.zeros(ids.shape, dtype=torch.float32, device=ids.device)
    lp[rows, cols] = logprobs_from_logits(logits, ids[rows, cols]).float()
    ent = None
    if with_entropy:
        ent = torch.zeros_like(lp)
        ent[rows, cols] = entropy_from_logits(logits)
    return lp, ent


def _copy_policy_logprobs(
    model: nn.Module, batch: Batch, temperature: float, with_entropy: bool, pack: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``policy_only`` for a copy head (``agentrl.learn.copy_lm``): its forward pass computes the
    pointer's queries and the [N, V] mixture at the wanted positions alone (``logits_at``)."""
    rows, cols = _wanted(batch)
    inputs, line, col = _inputs_at(batch, model, rows, cols, pack)
    with forward_context(model):
        logits = model(**inputs, logits_at=(line, col)).logits.float()
    return _token_results(logits, batch, rows, cols, temperature, with_entropy)


def _policy_logprobs(
    model: nn.Module,
    split: tuple[nn.Module, nn.Module],
    batch: Batch,
    temperature: float,
    with_entropy: bool,
    pack: bool,
    chunk: int,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    decoder, head = split
    ids = batch["input_ids"]
    rows, cols = _wanted(batch)
    with forward_context(decoder):
        inputs, line, col = _inputs_at(batch, model, rows, cols, pack)
        hidden = decoder(**inputs).last_hidden_state
        h = hidden[line, col]  # the hidden state at t − 1 predicts token t
        del hidden
        chunked = chunk > 0 and type(head) is nn.Linear
        if chunked:
            from agentrl.learn.chunked_head import head_logprobs

            tlp, tent = head_logprobs(
                h, head.weight, head.bias, ids[rows, cols], temperature, chunk, with_entropy
            )
        else:
            logits = head(h).float()
    if not chunked:  # the [N, V] logits of the N wanted positions at once
        return _token_results(logits, batch, rows, cols, temperature, with_entropy)
    lp = torch.zeros(ids.shape, dtype=torch.float32, device=ids.device)
    lp[rows, cols] = tlp
    ent = None
    if with_entropy:
        ent = torch.zeros_like(lp)
        ent[rows, cols] = tent
    return lp, ent


def forward_values(critic: nn.Module, batch: Batch, pack: bool = False) -> torch.Tensor:
    """The critic's V(s_t) for every token: [B, T] (float32); ``pack`` as in ``forward_logprobs``."""
    p = _Packing(batch, critic) if pack else None
    with forward_context(critic):
        values = critic(**(p.inputs if p else _inputs(batch))).float()
    return p.unpack(values) if p is not None else values


def micro_batches(
    batch: Batch, rows: torch.Tensor, token_budget: int, packed: bool = False
) -> Iterator[Batch]:
    """Split ``rows`` (indices into the batch) into micro-batches of at most ``token_budget`` tokens —
    padded tokens, or real tokens when the forward pass packs the rows — each trimmed to its longest
    row. Rows are taken in length order to waste little padding."""
    # the lengths where ``rows`` live: the batch may be on a GPU while ``rows`` (an arange or a
    # permutation drawn on the CPU) are not, and a tensor is indexed only by indices on its device
    # or on the CPU
    lengths = batch["attention_mask"][rows].sum(-1).to(rows.device)
    by_length = torch.argsort(lengths, descending=True)
    order = rows[by_length]
    sorted_len = lengths[by_length].tolist()
    start = 0
    while start < len(order):
        stop_point()  # Ctrl-C, SIGTERM: between micro-batches (agentrl.stopping)
        if packed:
            total, n = 0, 0
            while start + n < len(order) and (n == 0 or total + sorted_len[start + n] <= token_budget):
                total += sorted_len[start + n]
                n += 1
        else:
            n = max(1, token_budget // max(int(sorted_len[start]), 1))
        idx = order[start : start + n]
        width = int(batch["attention_mask"][idx].sum(-1).max())
        mb = {k: (v[idx, :width] if v.dim() == 2 else v[idx]) for k, v in batch.items()}
        mb["_rows"] = idx
        yield mb
        start += n


@torch.no_grad()
def chunked_forward(
    fn: Callable[[Batch], torch.Tensor], batch: Batch, token_budget: int, packed: bool = False
) -> torch.Tensor:
    """``fn`` (a per-token forward such as ``forward_logprobs``) over the whole batch, one micro-batch
    at a time so that a large batch never needs one huge forward pass: [B, T] (float32)."""
    B, T = batch["input_ids"].shape
    out = torch.zeros(B, T, dtype=torch.float32, device=batch["input_ids"].device)
    for mb in micro_batches(batch, torch.arange(B), token_budget, packed):
        y = fn(mb)
        out[mb["_rows"], : y.shape[1]] = y.float()
    return out
