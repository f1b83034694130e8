"""The sampling layer: everything that samples tokens for the one episode loop.

- ``HFEngine`` (``hf``): a transformers model samples every episode of a step in lock-step
  (``generate.hf_generate_batch``), keeping each episode's KV cache between turns (``kv_cache``);
  ``HFSnapshotEngine`` samples from a frozen copy, ``ProcessSnapshotEngine`` (``process``) from a copy
  in a child process, and ``OneStepOffPolicy`` (``overlap``) runs the next step's rollout while the
  trainer updates.
- ``VLLMRollout`` / ``VLLMEngine`` (``vllm_engine``): a vLLM server samples (``vllm_client``), and
  ``WeightSync`` (``vllm_sync``) pushes the trainer's weights after each update.
- ``hf_engine`` (``engines``): the in-process engine on a live model, which the trainer's steps,
  its evaluation and the ``hf:`` policy (``agentrl.train.load_hf_policy``) all build.

Every engine takes an ``EpisodeLoop``: the run's ``agentrl.tokens.SamplingSpec`` (stop ids, limits,
temperature, top-p; one builder, ``agentrl.tokens.sampling_spec``), the expander that spec builds,
and the env executor. The episode loop (``agentrl.rollout.episode``) alone decides how a turn
finished. The trainer (``agentrl.train``) picks an engine from its config
(``agentrl.train.engines.make_engine``); nothing here imports ``agentrl.train``.
Names are imported on first use, so that importing the package costs nothing.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "EpisodeLoop",
    "HFEngine",
    "HFSnapshotEngine",
    "OneStepOffPolicy",
    "ProcessSnapshotEngine",
    "RolloutEngine",
    "VLLMEngine",
    "VLLMRollout",
    "hf_engine",
    "hf_generate_batch",
]

_WHERE = {
    "EpisodeLoop": "hf",
    "HFEngine": "hf",
    "HFSnapshotEngine": "engines",
    "OneStepOffPolicy": "overlap",
    "ProcessSnapshotEngine": "process",
    "RolloutEngine": "engines",
    "VLLMEngine": "vllm_engine",
    "VLLMRollout": "engines",
    "hf_engine": "engines",
    "hf_generate_batch": "generate",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'agentrl.sampling' has no attribute {name!r}")
    return getattr(importlib.import_module(f"agentrl.sampling.{_WHERE[name]}"), name)


def __dir__() -> list[str]:
    return sorted(__all__)
