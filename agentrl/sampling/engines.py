"""Rollout engines: how a training step samples its episodes. The trainer chooses one at setup
(``rollout.engine``, ``agentrl.train.engines.make_engine``).

All run the one episode loop (``agentrl.rollout.episode``) and differ only in the generate function:

- ``HFEngine`` (``hf``, ``agentrl.sampling.hf``): the trainer's own model samples, all episodes in lock-step through
  ``hf_generate_batch``; under FSDP the weights are gathered once per rollout, so ranks may sample
  different lengths. It samples from the live model, so nothing is synced after an update. With
  ``rollout.kv_cache`` each episode keeps its KV cache between turns (``agentrl.sampling.kv_cache``),
  made afresh for each rollout (the weights change between rollouts).
- ``HFSnapshotEngine`` (``hf`` with ``rollout.staleness: 1``): the same sampler on a frozen copy of
  the policy, which ``after_update`` overwrites with the new weights; the copy lets a rollout run
  in a background thread while the live policy updates (``agentrl.sampling.overlap``).
- ``ProcessSnapshotEngine`` (``hf`` with ``rollout.staleness: 1`` and ``rollout.sampler: process``,
  ``agentrl.sampling.process``): ``HFEngine`` on a copy of the policy in shared memory, in a
  child process with its own env pool and torch threads.
- ``VLLMRollout`` (``vllm``): a vLLM server samples (``agentrl.sampling.vllm_engine.VLLMEngine``);
  after each update rank 0 pushes the new weights.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch

from agentrl.errors import ConfigError
from agentrl.learn.models import frozen_copy
from agentrl.rollout.episode import EpisodeSpec
from agentrl.sampling.hf import EpisodeLoop, HFEngine
from agentrl.sampling.threads import ThreadsSetting, sampling_threads
from agentrl.trajectory import Trajectory

__all__ = ["EpisodeLoop", "HFEngine", "HFSnapshotEngine", "RolloutEngine", "VLLMRollout", "hf_engine"]


class RolloutEngine(Protocol):
    """What the trainer needs from a sampler."""

    def rollout(self, envs: Sequence[Any], specs: Sequence[EpisodeSpec]) -> list[Trajectory]:
        """Run ``specs`` (one env each) through the episode loop; one trajectory per spec, in order."""
        ...

    def after_update(self, model: torch.nn.Module, step: int) -> None:
        """Make the next rollout sample from ``model`` as updated at ``step`` (collective: every rank)."""
        ...

    def prepare(self) -> None:
        """Take the trainer's weights as they are now, if the engine has not yet (the first rollout
        does it otherwise); ``rollout.staleness: 1`` calls it on the trainer's thread."""
        ...

    def close(self) -> None:
        """Release what the engine holds."""
        ...


def hf_engine(
    model: torch.nn.Module, loop: EpisodeLoop, *, pad_id: int, kv_cache_tokens: int, threads: ThreadsSetting
) -> HFEngine:
    """The in-process engine on the live ``model``: the trainer's steps (``rollout.staleness: 0``), its
    evaluation and the ``hf:`` policy all build theirs here. ``threads``: ``rollout.sampling_threads``
    (a count, ``"auto"``, or None for the process's)."""
    return HFEngine(
        model, loop, pad_id=pad_id, kv_cache_tokens=kv_cache_tokens, threads=sampling_threads(model, threads)
    )


class HFSnapshotEngine(HFEngine):
    """``HFEngine`` on a frozen copy of the policy, made by ``prepare`` (or the first rollout) and
    overwritten by ``after_update``: the copy changes only between rollouts, so a rollout in a
    background thread never sees weights the trainer is halfway through updating."""

    def __init__(
        self, model: torch.nn.Module, loop: EpisodeLoop, *, pad_id: int, kv_cache_tokens: int = 0
    ) -> None:
        super().__init__(model, loop, pad_id=pad_id, kv_cache_tokens=kv_cache_tokens)
        self.live: torch.nn.Module = model
        self.model = None  # type: ignore[assignment]  # the copy, made on first use

    def prepare(self) -> None:
        if self.model is None:
            self.model = frozen_copy(self.live)

    def rollout(self, envs: Sequence[Any], specs: Sequence[EpisodeSpec]) -> list[Trajectory]:
        self.prepare()
        return super().rollout(envs, specs)

    def after_update(self, model: torch.nn.Module, step: int) -> None:
        """Copy ``model``'s weights (as updated at ``step``) into the sampler's copy."""
        if self.model is None:
            self.model = frozen_copy(model)
        else:
            with torch.no_grad():
                self.model.load_state_dict(model.state_dict())


class VLLMRollout:
    """A vLLM server samples; after each update rank 0 pushes the new weights (``VLLMEngine.sync``).

    The server connection is made on first use (``server()``): it checks the server's version and
    pushes ``model`` as it is then (warm-started or resumed), so the first rollout samples from it."""

    def __init__(self, settings: Any, model: torch.nn.Module, loop: EpisodeLoop, *, step: int,
                 tokenizer: Any, output_dir: Path, model_path: str, lora: bool) -> None:  # fmt: skip
        """``settings``: the run's ``vllm`` block (``agentrl.train.config.VLLMSettings``);
        ``model_path``: the served model's default name; ``lora``: the policy trains LoRA adapters."""
        if settings.sync == "lora" and not lora:
            raise ConfigError("vllm.sync: lora needs model.lora_rank > 0")
        if settings.sync in ("full", "nccl") and lora:
            raise ConfigError(f"vllm.sync: {settings.sync} sends whole models; with LoRA use sync: lora")
        self.settings, self.model, self.loop, self.step = settings, model, loop, step
        self.tokenizer, self.output_dir, self.model_path = tokenizer, output_dir, model_path
        self._server: Any = None

    def server(self) -> Any:
        """The run's ``agentrl.sampling.vllm_engine.VLLMEngine``, made (and synced) on first use."""
        if self._server is None:
            from agentrl.sampling.vllm_engine import VLLMEngine

            server = VLLMEngine(
                self.settings, default_model=self.model_path, output_dir=self.output_dir,
                tokenizer=self.tokenizer,
            )  # fmt: skip
            server.sync(self.model, self.step)
            self._server = server
        return self._server

    def rollout(self, envs: Sequence[Any], specs: Sequence[EpisodeSpec]) -> list[Trajectory]:
        return self.rollout_with(self.loop)(envs, specs)

    def rollout_with(
        self, loop: EpisodeLoop
    ) -> Callable[[Sequence[Any], Sequence[EpisodeSpec]], list[Trajectory]]:
        """A rollout on the same server with another episode loop (the trainer's evaluation: its
        spec's temperature, its context policy)."""

        def rollout(envs: Sequence[Any], specs: Sequence[EpisodeSpec]) -> list[Trajectory]:
            results = self.server().run_episodes(
                envs, specs, expander=loop.expander, stop_ids=loop.stop_ids, limits=loop.limits,
                temperature=loop.temperature, top_p=loop.top_p, executor=loop.executor,
            )  # fmt: skip
            return [res.trajectory for res in results]

        return rollout

    def after_update(self, model: torch.nn.Module, step: int) -> None:
        """Rank 0 pushes the new weights; every rank waits for it. Never call it while a rollout is
        in flight: ``full`` and ``nccl`` replace the weights under running requests (an episode
        would mix versions) and ``lora`` unloads the adapter they name."""
        self.server().sync(model, step)

    def prepare(self) -> None:
        """Connect to the server and push the current weights, if not done yet."""
        self.server()

    def close(self) -> None:
        """Nothing held between rollouts (each opens and closes its own client)."""
