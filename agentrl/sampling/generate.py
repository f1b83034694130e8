"""Batched sampling from a transformers causal LM, recording exactly what was sampled (TITO).

A small explicit loop instead of ``model.generate``: prompts are left-padded into one batch, the
KV cache advances one token per step, and every row samples with its own ``torch.Generator``
(Gumbel-max over the processed log-probabilities), so a row's tokens depend only on its seed and
its prompt, never on which other rows share the batch. Each row stops at its first stop token
(kept, as sampled) or at ``max_new_tokens``.

``hf_generate_batch(model, ...)`` is this sampler as the episode loop's lock-step batched generate
function (``agentrl.rollout.episode``): one ``sample_batch`` call per turn for every live episode,
each row seeded with its turn's seed. Given an ``EpisodeKVCache`` (``agentrl.sampling.kv_cache``), each
episode keeps its keys and values between turns: the batch's prefill then runs only each row's
uncached tokens, after its cached prefix stacked right-aligned into the batch cache (``_prefill``:
one forward pass whatever is cached), and each row's prompt and fed ids are cached again for its
next turn.
The stop condition is ``_sample``'s one test ``chosen[i] in stop_ids``.
"""

from __future__ import annotations

import inspect
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from agentrl.learn.models import autocast
from agentrl.rollout.episode import BatchGenerateFn, Generation, Request, trim
from agentrl.sampling.kv_cache import (
    KV,
    EpisodeKVCache,
    PrefillStats,
    cache_kwarg,
    full_attention_kv,
    returned_cache,
    stack_left_padded,
)

__all__ = ["Sample", "hf_generate_batch", "sample_batch"]


@dataclass
class Sample:
    """One sampled turn: ids as sampled (stop token included when one was sampled) and the sampling
    distribution's log-probability of each (the episode loop decides how the turn finished)."""

    token_ids: list[int]
    logprobs: list[float]
    prefill_tokens: int = 0  # prompt tokens this call ran through the model (the rest came from a cache)


def _process(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """Log-probabilities of the sampling distribution: temperature, then nucleus truncation."""
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_lp, order = logp.sort(dim=-1, descending=True)
        cum = sorted_lp.exp().cumsum(-1)
        drop_sorted = cum - sorted_lp.exp() >= top_p  # keep the smallest prefix whose mass reaches top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logp = torch.log_softmax(logp.masked_fill(drop, float("-inf")), dim=-1)
    return logp


def sample_batch(
    model: nn.Module,
    prompts: Sequence[Sequence[int]],
    *,
    seeds: Sequence[int],
    stop_ids: set[int],
    pad_id: int,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    cache: EpisodeKVCache | None = None,
    keys: Sequence[str] | None = None,
) -> list[Sample]:
    """Sample one continuation per prompt. ``prompts``: B lists of token ids; ``seeds``: B ints.

    With ``cache`` (and one episode key per prompt in ``keys``), each row prefills only what its
    episode's cached prefix does not cover, and its prompt and sampled ids are cached for its next
    turn (``agentrl.sampling.kv_cache``); the sampled ids are those of the uncached path up to float
    rounding (equal greedily; log-probs within ~1e-6)."""
    if len(prompts) != len(seeds):
        raise ValueError("one seed per prompt")
    if cache is not None and (keys is None or len(keys) != len(prompts)):
        raise ValueError("a KV cache needs one episode key per prompt")
    if not prompts:
        return []
    with torch.no_grad(), autocast(model):
        return _sample(
            model, prompts, seeds, stop_ids, pad_id, max_new_tokens, temperature, top_p, cache, keys
        )


def hf_generate_batch(
    model: nn.Module,
    *,
    stop_ids: Collection[int],
    pad_id: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    cache: EpisodeKVCache | None = None,
    stats: PrefillStats | None = None,
) -> BatchGenerateFn:
    """``sample_batch`` as a lock-step batched generate function: one row per request (its
    ``prompt_ids``, its turn ``seed``), up to the largest ``max_tokens`` of the batch, each row then
    cut to its own ``max_tokens``. With ``cache``, each episode (its ``spec.id``) keeps its KV cache
    between turns; episodes missing from a call have ended and lose theirs. ``stats`` (when given)
    counts the prompt and prefilled tokens of each turn."""
    stops = set(stop_ids)

    def generate(requests: list[Request]) -> list[Generation]:
        if any(r.prompt_ids is None or r.seed is None or r.max_tokens is None for r in requests):
            raise ValueError("the HF sampler needs token-mode requests with a seed and max_tokens")
        samples = sample_batch(
            model,
            [r.prompt_ids or [] for r in requests],
            seeds=[int(r.seed or 0) for r in requests],
            stop_ids=stops,
            pad_id=pad_id,
            max_new_tokens=max(int(r.max_tokens or 0) for r in requests),
            temperature=temperature,
            top_p=top_p,
            cache=cache,
            keys=[r.spec.id for r in requests],
        )
        if stats is not None:
            for s, r in zip(samples, requests, strict=True):
                stats.add(r.turn, len(r.prompt_ids or []), s.prefill_tokens)
        return [trim(s, r.max_tokens) for s, r in zip(samples, requests, strict=True)]

    return generate


def _last(model: nn.Module) -> dict[str, int]:
    """Ask for the last position's logits only, where the model can (a prefill samples from them)."""
    return {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}


def _prefill(model, prompts, cached, pad_id, device):  # type: ignore[no-untyped-def]
    """One forward pass over every row's uncached tokens. ``cached``: per row ``(n, kv)``, the keys
    and values of its first ``n`` prompt ids (``(0, None)``: none). Layout, row by row: its cached
    columns right-aligned in a block of ``C = max n`` (the batch cache), then its new tokens
    right-aligned in a block of ``N``, padding masked out; with nothing cached this is plain left
    padding. Returns the cache, the last logits ``[B, V]``, the mask ``[B, C + N]``, each row's next
    position and how many tokens each row prefilled."""
    from transformers import DynamicCache

    B, C = len(prompts), max(n for n, _ in cached)
    news = [list(p[n:]) for p, (n, _) in zip(prompts, cached, strict=True)]
    N = max(len(x) for x in news)
    input_ids = torch.full((B, N), pad_id, dtype=torch.long)
    attn = torch.zeros(B, C + N, dtype=torch.long)
    positions = torch.zeros(B, N, dtype=torch.long)
    for i, (new, (n, _)) in enumerate(zip(news, cached, strict=True)):
        m = len(new)
        input_ids[i, N - m :] = torch.tensor(new, dtype=torch.long)
        attn[i, C - n : C] = 1
        attn[i, C + N - m :] = 1
        positions[i, N - m :] = torch.arange(n, n + m)
    input_ids, attn, positions = input_ids.to(device), attn.to(device), positions.to(device)
    past = DynamicCache(ddp_cache_data=stack_left_padded([kv for _, kv in cached], C)) if C else None
    out = model(
        input_ids=input_ids, attention_mask=attn, position_ids=positions, use_cache=True,
        **{cache_kwarg(model): past}, **_last(model),
    )  # fmt: skip
    next_pos = torch.tensor([len(p) for p in prompts], device=device)
    return returned_cache(out), out.logits[:, -1], attn, next_pos, [len(x) for x in news]


def _sample(model, prompts, seeds, stop_ids, pad_id, max_new_tokens, temperature, top_p, cache, keys):  # type: ignore[no-untyped-def]
    device = next(model.parameters()).device
    B = len(prompts)
    gens = [torch.Generator().manual_seed(int(s)) for s in seeds]
    was_training = model.training
    model.eval()
    cached = (
        [(0, None)] * B if cache is None else [cache.take(k, p) for k, p in zip(keys, prompts, strict=True)]
    )
    past, logits, attn, next_pos, prefilled = _prefill(model, prompts, cached, pad_id, device)
    prefill_mask = attn
    tokens: list[list[int]] = [[] for _ in range(B)]
    lps: list[list[float]] = [[] for _ in range(B)]
    done = [False] * B
    cache_arg = cache_kwarg(model)
    for _ in range(max_new_tokens):
        logp = _process(logits, temperature, top_p)
        V = logp.shape[-1]
        # Gumbel-max with per-row generators: argmax(logp + G) samples from softmax(logp).
        u = torch.stack([torch.rand(V, generator=g) for g in gens]).clamp_(1e-12, 1 - 1e-7).to(device)
        choice = (logp - torch.log(-torch.log(u))).argmax(-1)
        picked = logp.gather(-1, choice[:, None]).squeeze(-1).tolist()
        chosen = choice.tolist()
        for i in range(B):
            if done[i]:
                continue
            tokens[i].append(chosen[i])
            lps[i].append(picked[i])
            done[i] = chosen[i] in stop_ids
        if all(done):
            break
        step_ids = torch.tensor([pad_id if d and not t else t[-1] for d, t in zip(done, tokens, strict=True)])
        attn = torch.cat([attn, torch.ones(B, 1, dtype=attn.dtype, device=device)], dim=1)
        out = model(
            input_ids=step_ids[:, None].to(device),
            attention_mask=attn,
            position_ids=next_pos[:, None],
            use_cache=True,
            **{cache_arg: past},
        )
        past, logits = returned_cache(out), out.logits[:, -1]
        next_pos = next_pos + 1
    model.train(was_training)
    if cache is not None:
        _keep(cache, keys, prompts, tokens, full_attention_kv(past), prefill_mask)
    return [Sample(t, lp, n) for t, lp, n in zip(tokens, lps, prefilled, strict=True)]


def _keep(cache: EpisodeKVCache, keys, prompts, tokens, kv: KV | None, prefill_mask: torch.Tensor) -> None:  # type: ignore[no-untyped-def]
    """Keep each row's keys and values of its prompt (its unmasked prefill columns) and of the
    sampled ids fed back after them (all but the last sampled: it was never an input while the row
    was live). None for ``kv``: the model's cache is not full attention, nothing is kept."""
    cache.retain(keys)  # episodes absent from this call have ended
    if kv is None:
        return
    width = prefill_mask.shape[1]
    for i, (key, p, t) in enumerate(zip(keys, prompts, tokens, strict=True)):
        fed = t[:-1]
        cols = torch.cat(
            [prefill_mask[i].nonzero()[:, 0], torch.arange(width, width + len(fed), device=kv[0][0].device)]
        )
        cache.put(key, list(p) + fed, [(k[i : i + 1, :, cols], v[i : i + 1, :, cols]) for k, v in kv])
