"""``HFEngine``: the trainer's own model samples all of a step's episodes in lock-step through the
one episode loop (``agentrl.rollout.episode``), with ``EpisodeLoop``, the loop's settings shared by
every engine of a run: the run's ``SamplingSpec``, the expander it built, the env executor.
``agentrl.train.engines`` chooses among the engines; the sampler process (``agentrl.sampling.process``)
runs this engine in a child.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agentrl.learn.models import full_params
from agentrl.rollout.context import NO_CONTEXT_POLICY, ContextPolicy
from agentrl.rollout.episode import EpisodeSpec, Limits, run_episodes
from agentrl.sampling.generate import hf_generate_batch
from agentrl.sampling.kv_cache import EpisodeKVCache, PrefillStats
from agentrl.sampling.threads import intra_op_threads
from agentrl.tokens import Expander, SamplingSpec
from agentrl.trajectory import Trajectory

__all__ = ["EpisodeLoop", "HFEngine"]


@dataclass(frozen=True)
class EpisodeLoop:
    """The episode loop's settings shared by every engine of a run: ``spec`` (stop ids, limits,
    temperature, top-p), ``expander`` (built by ``spec.expander``; a sampler thread has its own copy
    of the tokenizer), the ``executor`` that steps the envs and the ``context`` policy of long
    episodes (``agentrl.rollout.context``)."""

    spec: SamplingSpec
    expander: Expander
    executor: cf.Executor
    context: ContextPolicy = NO_CONTEXT_POLICY  # how a long episode stays within max_len

    @property
    def stop_ids(self) -> Collection[int]:
        return self.spec.stop_ids

    @property
    def limits(self) -> Limits:
        return Limits(
            max_new_tokens=self.spec.max_new_tokens, max_len=self.spec.max_len, context=self.context
        )

    @property
    def temperature(self) -> float:
        return self.spec.temperature

    @property
    def top_p(self) -> float:
        return self.spec.top_p


class HFEngine:
    """The trainer's model samples all of a step's episodes in lock-step."""

    def __init__(
        self,
        model: torch.nn.Module,
        loop: EpisodeLoop,
        *,
        pad_id: int,
        kv_cache_tokens: int = 0,
        threads: int | None = None,
    ) -> None:
        """``kv_cache_tokens``: the cap of the per-episode KV caches kept between turns (0: none);
        ``threads``: torch's intra-op threads while it samples (``agentrl.sampling.threads``; None:
        the process's)."""
        self.model, self.loop, self.pad_id = model, loop, pad_id
        self.kv_cache_tokens = kv_cache_tokens
        self.threads = threads
        self.prefill = PrefillStats()  # the last rollout's prompt and prefilled tokens per turn
        self.kv_cache: EpisodeKVCache | None = None  # the last rollout's cache (its counters)

    def rollout(self, envs: Sequence[Any], specs: Sequence[EpisodeSpec]) -> list[Trajectory]:
        lp = self.loop
        self.prefill = PrefillStats()
        self.kv_cache = EpisodeKVCache(self.kv_cache_tokens) if self.kv_cache_tokens > 0 else None
        with full_params(self.model), intra_op_threads(self.threads):
            gen = hf_generate_batch(
                self.model,
                stop_ids=lp.stop_ids,
                pad_id=self.pad_id,
                temperature=lp.temperature,
                top_p=lp.top_p,
                cache=self.kv_cache,
                stats=self.prefill,
            )
            results = asyncio.run(
                run_episodes(
                    envs, specs, generate_batch=gen, expander=lp.expander, stop_ids=lp.stop_ids,
                    limits=lp.limits, executor=lp.executor,
                )
            )  # fmt: skip
        if self.kv_cache is not None:
            self.kv_cache.clear()  # the counters stay; the tensors go
        return [res.trajectory for res in results]

    def after_update(self, model: torch.nn.Module, step: int) -> None:
        """Nothing to do: the next rollout samples from the live model."""

    def prepare(self) -> None:
        """Nothing to do: the engine samples from the live model."""

    def close(self) -> None:
        """Nothing held."""
