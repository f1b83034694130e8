"""Rollouts through a vLLM server (``rollout.engine: vllm``), and the weight sync after each update.

``VLLMEngine.run_episodes`` runs the trainer's episodes through the one episode loop
(``agentrl.rollout.episode``) with ``vllm_generate`` as the generate function: token-in-token-out,
each turn sends the expander's generation prompt ids (exactly the training row's prefix) with the
turn's seed (``turn_seed(episode seed, turn)``, as the HF sampler uses), at most ``concurrency``
requests in flight. Episodes run concurrently, not in lock-step: one slow episode does not hold
the others back.

``VLLMEngine.sync(model, step)`` pushes the trainer's weights on rank 0 (``WeightSync``), then
every rank learns the served model name (it changes with LoRA) — a collective, so also a barrier.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from agentrl.errors import ConfigError
from agentrl.learn.models import is_sharded
from agentrl.policy.server_reply import CONTEXT_OVERFLOW, ContextOverflow
from agentrl.ranks import all_gather_objects, is_main
from agentrl.rollout.episode import (
    EpisodeResult,
    EpisodeSpec,
    GenerateFn,
    Limits,
    Request,
    Stop,
    run_episodes,
)
from agentrl.rundir import VLLM_SYNC
from agentrl.sampling.vllm_client import Generation, VLLMClient
from agentrl.sampling.vllm_sync import WeightSync
from agentrl.tokens import Expander

__all__ = ["VLLMEngine", "vllm_engine", "vllm_generate"]


def vllm_generate(
    client: VLLMClient,
    *,
    stop_ids: Collection[int],
    temperature: float = 1.0,
    top_p: float = 1.0,
    concurrency: int = 64,
) -> GenerateFn:
    """An open ``client`` as a token-mode generate function, ``concurrency`` requests at a time; a
    prompt longer than the server's context ends its episode as ``Stop(CONTEXT_OVERFLOW)``."""
    gate = asyncio.Semaphore(concurrency)
    stops = sorted(stop_ids)

    async def generate(req: Request) -> Generation | Stop:
        if req.prompt_ids is None or req.max_tokens is None:
            raise ValueError("vLLM rollouts need token-mode requests with max_tokens")
        async with gate:
            try:
                return await client.generate(
                    req.prompt_ids,
                    max_tokens=req.max_tokens,
                    temperature=temperature,
                    top_p=top_p,
                    seed=req.seed,
                    stop_ids=stops,
                )
            except ContextOverflow as e:  # the server's --max-model-len is below the trainer's
                return Stop(CONTEXT_OVERFLOW, str(e))

    return generate


class VLLMEngine:
    """The vLLM side of a training run: a client config, the weight sync, the served model name."""

    def __init__(self, settings: Any, *, default_model: str, output_dir: Path, tokenizer: Any) -> None:
        self.settings = s = settings
        self.served_model = s.served_model or default_model
        sync_dir = s.sync_dir or str(output_dir / VLLM_SYNC)
        self.weights = WeightSync(
            s.sync,
            s.base_url,
            self.served_model,
            sync_dir=sync_dir,
            lora_name=s.lora_name,
            tokenizer=tokenizer,
            timeout_s=s.sync_timeout_s,
            api_key=s.api_key,
            nccl_master=(s.nccl_master_address, s.nccl_master_port),
        )
        self.version = asyncio.run(self._version())

    def client(self) -> VLLMClient:
        """A fresh client for one rollout (httpx's async pools belong to one event loop)."""
        s = self.settings
        return VLLMClient(
            s.base_url,
            self.served_model,
            api_key=s.api_key,
            timeout_s=s.timeout_s,
            retries=s.retries,
            max_connections=s.concurrency,
            logprobs_processed=s.logprobs_processed,
        )

    async def _version(self) -> str:
        async with self.client() as c:
            return await c.check_version()

    def run_episodes(
        self,
        envs: Sequence[Any],
        specs: Sequence[EpisodeSpec],
        *,
        expander: Expander,
        stop_ids: Collection[int],
        limits: Limits,
        temperature: float = 1.0,
        top_p: float = 1.0,
        executor: cf.Executor | None = None,
    ) -> list[EpisodeResult]:
        """``specs`` through the server with the episode loop (one env each). The server samples
        from the weights the last ``sync`` gave it."""

        async def go() -> list[EpisodeResult]:
            async with self.client() as c:
                gen = vllm_generate(
                    c, stop_ids=stop_ids, temperature=temperature, top_p=top_p,
                    concurrency=self.settings.concurrency,
                )  # fmt: skip
                return await run_episodes(
                    envs, specs, generate=gen, expander=expander, stop_ids=stop_ids, limits=limits,
                    executor=executor,
                )  # fmt: skip

        return asyncio.run(go())

    def sync(self, model: Any, step: int) -> None:
        """Push ``model``'s weights from rank 0; every rank then uses the served name rank 0 reports.
        A sharded (FSDP) model is first gathered into a full state dict on rank 0 (a collective)."""
        state = _full_state_dict(model)
        name = self.weights.push(model, step, state_dict=state) if is_main() else None
        self.served_model = all_gather_objects(name)[0] or self.served_model


def _full_state_dict(model: Any) -> dict[str, Any] | None:
    """FSDP: the unsharded state dict, on rank 0's CPU (empty on the other ranks); otherwise None
    (the model's own parameters are whole)."""
    if not is_sharded(model):
        return None
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def vllm_engine(trainer: Any) -> VLLMEngine:
    """The ``VLLMEngine`` of a trainer set up with ``rollout.engine: vllm``, made on first use (see
    ``agentrl.sampling.engines.VLLMRollout.server``)."""
    server = getattr(trainer.engine, "server", None)
    if server is None:
        raise ConfigError("this trainer samples with rollout.engine: hf, not a vLLM server")
    return server()
