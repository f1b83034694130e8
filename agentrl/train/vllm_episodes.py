"""Rollouts through a vLLM server (``rollout.engine: vllm``), and the weight sync after each update.

``VLLMEngine.run_policy_episodes`` has the signature and result of
``agentrl.train.episodes.run_policy_episodes`` and the same token-in-token-out contract: each turn
conditions on ``expander.generation_prompt_ids(messages)`` (exactly the training row's prefix),
sends those ids as the prompt, and stores the sampled ids and logprobs on the assistant message.
Each turn's seed is ``turn_seed(episode seed, turn)``, as in the HF path. Episodes run
concurrently (asyncio; env steps in the trainer's thread pool), not in lock-step: one slow episode
does not hold the others back.

``VLLMEngine.sync(model, step)`` pushes the trainer's weights on rank 0 (``WeightSync``), then
every rank learns the served model name (it changes with LoRA) — a collective, so also a barrier.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentrl.env import ResearchEnv
from agentrl.errors import ConfigError
from agentrl.policy.vllm import VLLMClient
from agentrl.policy.vllm_sync import WeightSync
from agentrl.tokens import Expander, sampled_message
from agentrl.train.distributed import all_gather_objects, is_main
from agentrl.train.episodes import Job, finish_episode, turn_seed
from agentrl.trajectory import Trajectory

__all__ = ["VLLMEngine", "run_vllm_episodes", "vllm_engine"]


async def run_vllm_episodes(
    client: VLLMClient,
    tokenizer: Any,
    expander: Expander,
    envs: Sequence[ResearchEnv],
    jobs: Sequence[Job],
    *,
    max_new_tokens: int,
    max_len: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    stop_ids: set[int],
    executor: cf.Executor | None = None,
    concurrency: int = 64,
) -> list[Trajectory]:
    """Run ``jobs`` on ``envs`` (one env each) against an open ``client``; one trajectory per job.

    Episodes end as in the HF path: the env terminates or truncates, a turn hits ``max_new_tokens``
    without a stop token (``generation_limit``), or the next context would exceed ``max_len``.
    At most ``concurrency`` generation requests are in flight.
    """
    if len(envs) < len(jobs):
        raise ValueError("one env per job")
    loop = asyncio.get_running_loop()
    gate = asyncio.Semaphore(concurrency)
    stops = sorted(stop_ids)

    async def episode(env: ResearchEnv, job: Job) -> Trajectory:
        await loop.run_in_executor(executor, lambda: env.reset(seed=job.seed, options={"task": job.task}))
        turn = 0
        while True:
            prompt = expander.generation_prompt_ids(env.messages)
            if len(prompt) + max_new_tokens > max_len:
                return finish_episode(env, job, "max_len")
            async with gate:
                g = await client.generate(
                    prompt,
                    max_tokens=max_new_tokens,
                    temperature=temperature,
                    top_p=top_p,
                    seed=turn_seed(job.seed, turn),
                    stop_ids=stops,
                )
            msg = sampled_message(tokenizer, g.token_ids, g.logprobs, g.finish_reason, stop_ids)
            _, _, terminated, truncated, _ = await loop.run_in_executor(executor, env.step, msg)
            if terminated or truncated:
                return finish_episode(env, job, None)
            if g.finish_reason == "length":
                return finish_episode(env, job, "generation_limit")
            turn += 1

    return list(await asyncio.gather(*(episode(e, j) for e, j in zip(envs, jobs, strict=False))))


class VLLMEngine:
    """The vLLM side of a training run: a client config, the weight sync, the served model name."""

    def __init__(self, settings: Any, *, default_model: str, output_dir: Path, tokenizer: Any) -> None:
        self.settings = s = settings
        self.served_model = s.served_model or default_model
        sync_dir = s.sync_dir or str(output_dir / "vllm_sync")
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

    def run_policy_episodes(
        self,
        model: Any,
        tokenizer: Any,
        expander: Expander,
        envs: Sequence[ResearchEnv],
        jobs: Sequence[Job],
        *,
        max_new_tokens: int,
        max_len: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        stop_ids: set[int],
        pad_id: int,
        executor: cf.Executor | None = None,
    ) -> list[Trajectory]:
        """``agentrl.train.episodes.run_policy_episodes`` through the server. ``model`` and
        ``pad_id`` are unused: the server samples from the weights the last ``sync`` gave it."""
        del model, pad_id

        async def go() -> list[Trajectory]:
            async with self.client() as c:
                return await run_vllm_episodes(
                    c, tokenizer, expander, envs, jobs,
                    max_new_tokens=max_new_tokens, max_len=max_len, temperature=temperature,
                    top_p=top_p, stop_ids=stop_ids, executor=executor,
                    concurrency=self.settings.concurrency,
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
    from agentrl.train.fsdp import is_sharded

    if not is_sharded(model):
        return None
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def vllm_engine(trainer: Any) -> VLLMEngine:
    """The trainer's ``VLLMEngine``, made on first use: checks the server's version and pushes the
    current (warm-started or resumed) weights, so the first rollout samples from them."""
    engine = getattr(trainer, "_vllm_engine", None)
    if engine is None:
        cfg = trainer.cfg
        lora = cfg.model.lora_rank > 0
        if cfg.vllm.sync == "lora" and not lora:
            raise ConfigError("vllm.sync: lora needs model.lora_rank > 0")
        if cfg.vllm.sync in ("full", "nccl") and lora:
            raise ConfigError(f"vllm.sync: {cfg.vllm.sync} sends whole models; with LoRA use sync: lora")
        engine = VLLMEngine(
            cfg.vllm, default_model=cfg.model.path, output_dir=trainer.out, tokenizer=trainer.tokenizer
        )
        engine.sync(trainer.model, trainer.step)
        trainer._vllm_engine = engine
    return engine
