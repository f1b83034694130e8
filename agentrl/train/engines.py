"""Which rollout engine a run samples with, from its config (``rollout.engine``, ``rollout.staleness``,
``rollout.sampler``): the engines themselves are the sampling layer's (``agentrl.sampling.engines``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from agentrl.errors import ConfigError
from agentrl.learn.models import is_sharded
from agentrl.sampling.engines import EpisodeLoop, HFSnapshotEngine, RolloutEngine, VLLMRollout, hf_engine
from agentrl.train.config import TrainConfig

__all__ = ["make_engine"]


def make_engine(
    cfg: TrainConfig, model: torch.nn.Module, loop: EpisodeLoop, *, pad_id: int, step: int, tokenizer: Any,
    output_dir: Path, env_config: dict[str, Any] | None = None,
) -> RolloutEngine:  # fmt: skip
    """The engine ``cfg.rollout.engine`` names, sampling from ``model`` (as it is at ``step``); with
    ``rollout.staleness: 1`` the HF engine samples from its own copy of the weights, in a background
    thread or (``rollout.sampler: process``) a child process stepping envs made from ``env_config``."""
    if cfg.rollout.engine == "vllm":
        return VLLMRollout(
            cfg.vllm, model, loop, step=step, tokenizer=tokenizer, output_dir=output_dir,
            model_path=cfg.model.path, lora=cfg.model.lora_rank > 0,
        )  # fmt: skip
    cache_tokens = cfg.rollout.kv_cache_tokens if cfg.rollout.kv_cache else 0
    if cfg.rollout.staleness == 0:
        return hf_engine(
            model, loop, pad_id=pad_id, kv_cache_tokens=cache_tokens, threads=cfg.rollout.sampling_threads
        )
    if is_sharded(model):
        raise ConfigError(
            "rollout.staleness: 1 with engine hf keeps a whole copy of the policy; "
            "with parallelism: fsdp use staleness 0 or engine vllm"
        )
    if cfg.rollout.sampler == "thread":
        return HFSnapshotEngine(model, loop, pad_id=pad_id, kv_cache_tokens=cache_tokens)
    from agentrl.sampling.process import ProcessSnapshotEngine, SamplerSetup

    if env_config is None:
        raise ValueError("rollout.sampler: process needs the env config")
    r = cfg.rollout
    setup = SamplerSetup(
        tokenizer, loop.spec, pad_id, cache_tokens, env_config, r.env_workers, r.torch_threads, loop.context
    )
    return ProcessSnapshotEngine(model, setup)
