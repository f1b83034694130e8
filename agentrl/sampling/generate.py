"""Batched sampling from a transformers causal LM, recording exactly what was sampled (TITO).

A small explicit loop instead of ``model.generate``: prompts are left-padded into one batch, the
KV cache (allocated once per call: ``agentrl.sampling.decode_cache``) advances one token per step,
and every row samples by Gumbel-max over the processed log-probabilities with noise hashed from its
seed, the position and the token id on the model's device (``agentrl.sampling.draws``), so a row's
tokens depend only on its seed and its prompt, never on which other rows share the batch. Each row
stops at its first stop token (kept, as sampled) or at ``max_new_tokens``; what the rows sampled
stays on the device until the call ends, stops are checked every token on a CPU and every 8 on an
accelerator, and finished rows leave the batch when that saves work (``_Batch``).

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

from agentrl.learn.models import forward_context
from agentrl.rollout.episode import BatchGenerateFn, Generation, Request, trim
from agentrl.sampling.decode_cache import preallocate
from agentrl.sampling.draws import GumbelNoise, row_keys, token_keys
from agentrl.sampling.kv_cache import (
    EpisodeKVCache,
    PrefillStats,
    cache_kwarg,
    full_attention_kv,
    returned_cache,
    stack_left_padded,
)
from agentrl.stopping import stop_point

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
    scaled = logits.float() if temperature == 1.0 else logits.float() / temperature
    logp = torch.log_softmax(scaled, dim=-1)
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
    with torch.no_grad(), forward_context(model):
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
    B, T = len(prompts), max_new_tokens
    was_training = model.training
    model.eval()
    cached = (
        [(0, None)] * B if cache is None else [cache.take(k, p) for k, p in zip(keys, prompts, strict=True)]
    )
    past, logits, prefill_mask, next_pos, prefilled = _prefill(model, prompts, cached, pad_id, device)
    W = prefill_mask.shape[1]
    run = _Batch(B, T, W, seeds, logits, prefill_mask, preallocate(past, T))
    stops = torch.tensor(sorted(stop_ids), dtype=torch.long, device=device)
    kept: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}
    cache_arg = cache_kwarg(model)
    for t in range(T):
        stop_point()  # Ctrl-C, SIGTERM: between tokens (agentrl.stopping)
        logp = _process(logits, temperature, top_p)
        choice = run.noise(t).add_(logp).argmax(-1)  # Gumbel-max: a draw from softmax(logp)
        run.record(t, choice, logp.gather(-1, choice[:, None]).squeeze(-1), stops)
        if t == T - 1 or (run.due(t) and not run.any_live()):
            break
        if run.due(t):
            drop = run.finished_rows(T - t - 1)
            if drop:
                if cache is not None:
                    kept.update(_rows_kv(past, run, drop, prefill_mask))
                keep = run.drop(drop)
                past.batch_select_indices(keep)
                logits, choice, next_pos = logits[keep], choice[keep], next_pos[keep]
        out = model(
            input_ids=torch.where(run.live, choice, pad_id)[:, None],
            attention_mask=run.mask[:, : W + t + 1],
            position_ids=next_pos[:, None],
            use_cache=True,
            **{cache_arg: past},
        )
        past, logits = returned_cache(out), out.logits[:, -1]
        next_pos = next_pos + 1
    model.train(was_training)
    tokens, lps = run.result()
    if cache is not None:
        kept.update(_rows_kv(past, run, list(range(run.live.shape[0])), prefill_mask))
        _keep(cache, keys, prompts, tokens, kept)
    return [Sample(t, lp, n) for t, lp, n in zip(tokens, lps, prefilled, strict=True)]


class _Batch:
    """The rows a sampling call still decodes: their draws, attention mask and positions in the
    call's outputs, and what each row sampled so far (on the model's device: read back once at the
    end). ``rows[j]`` is the call's row at batch index ``j``; finished rows leave the batch when
    that saves more decoding than it costs (``finished_rows``); with a cache that cannot drop rows,
    they stay and are masked."""

    def __init__(self, B, T, W, seeds, logits, prefill_mask, can_drop):  # type: ignore[no-untyped-def]
        device = logits.device
        # the rows' noise over the vocabulary of the prefill's logits (agentrl.sampling.draws)
        self.noise = GumbelNoise(row_keys(seeds, device), token_keys(logits.shape[-1], device))
        self.mask = torch.cat([prefill_mask, prefill_mask.new_ones(B, T)], dim=1)
        self.live = torch.ones(B, dtype=torch.bool, device=device)
        self.ids = torch.full((B, T), 0, dtype=torch.long, device=device)
        self.lps = torch.zeros((B, T), dtype=torch.float32, device=device)
        self.ends = torch.full((B,), T, dtype=torch.long, device=device)
        self._index = torch.arange(B, device=device)
        self.can_drop = can_drop
        # On a CPU reading a flag costs nothing; on an accelerator it waits for the device: every 8 tokens.
        self.every = 1 if device.type == "cpu" else 8

    def record(self, t: int, choice: torch.Tensor, logp: torch.Tensor, stops: torch.Tensor) -> None:
        self.ids[self._index, t] = choice
        self.lps[self._index, t] = logp
        if stops.numel():
            hit = self.live & torch.isin(choice, stops)
            self.ends[self._index] = torch.where(hit, t + 1, self.ends[self._index])
            self.live = self.live & ~hit

    @property
    def rows(self) -> list[int]:
        """The call's row at each batch index."""
        return self._index.tolist()

    def due(self, t: int) -> bool:
        return (t + 1) % self.every == 0

    def any_live(self) -> bool:
        return bool(self.live.any())

    def finished_rows(self, steps_left: int) -> list[int]:
        """Batch indices of finished rows, when dropping them saves at least a decode step's work
        (the rows' remaining steps against the copy of the batch's cache that dropping them costs)."""
        if not self.can_drop:
            return []
        done = (~self.live).nonzero()[:, 0].tolist()
        return done if done and len(done) * steps_left >= self.live.shape[0] else []

    def drop(self, drop: list[int]) -> torch.Tensor:
        gone = set(drop)
        keep = [j for j in range(self.live.shape[0]) if j not in gone]
        index = torch.tensor(keep, dtype=torch.long, device=self.live.device)
        self.mask, self.live = self.mask[index], self.live[index]
        self.noise.select(index)
        self._index = self._index[index]
        return index

    def result(self) -> tuple[list[list[int]], list[list[float]]]:
        ends = self.ends.tolist()
        ids, lps = self.ids.tolist(), self.lps.tolist()
        return [r[:n] for r, n in zip(ids, ends, strict=True)], [
            r[:n] for r, n in zip(lps, ends, strict=True)
        ]


def _rows_kv(past, run: _Batch, batch_rows: list[int], prefill_mask: torch.Tensor) -> dict[int, list]:  # type: ignore[no-untyped-def]
    """For the call's rows at ``batch_rows``: the keys and values of the prompt (its unmasked prefill
    columns) and of the sampled ids fed back after it (all but the last sampled: never an input
    while the row was live), per layer. Empty for a cache that is not full attention."""
    kv = full_attention_kv(past)
    if kv is None:
        return {}
    width = prefill_mask.shape[1]
    ends = run.ends[run._index[batch_rows]].tolist() if batch_rows else []
    rows = run.rows
    out = {}
    for j, n in zip(batch_rows, ends, strict=True):
        i = rows[j]
        cols = torch.cat(
            [prefill_mask[i].nonzero()[:, 0], torch.arange(width, width + n - 1, device=prefill_mask.device)]
        )
        out[i] = [(k[j : j + 1, :, cols], v[j : j + 1, :, cols]) for k, v in kv]
    return out


def _keep(cache: EpisodeKVCache, keys, prompts, tokens, kept: dict[int, list]) -> None:  # type: ignore[no-untyped-def]
    """Cache each row's prompt and fed ids with their keys and values (``_rows_kv``); nothing when
    the model's cache is not full attention."""
    cache.retain(keys)  # episodes absent from this call have ended
    for i, (key, p, t) in enumerate(zip(keys, prompts, tokens, strict=True)):
        if i in kept:
            cache.put(key, list(p) + t[:-1], kept[i])
