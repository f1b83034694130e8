"""What one RL update computes, shared by ``agentrl.train`` (which adds the loop, the ranks, the
optimisers and the checkpoints) and by ``agentrl.replay`` / ``agentrl.explain`` (which recompute it
from stored trajectories): the algorithm settings, the batch with its reward placement, the
advantages, the policy/critic models and their forward passes, and a critic rebuilt from a
checkpoint (layer 2).

Names are imported on first use, so ``import agentrl.learn`` does not import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "AlgorithmConfig",
    "ValueModel",
    "build_batch",
    "build_tiny_model",
    "chunked_forward",
    "compute_advantages",
    "forward_logprobs",
    "forward_values",
    "load_critic",
    "normalized_reward",
    "training_reward",
]

_WHERE = {
    "AlgorithmConfig": "algorithm",
    "ValueModel": "models",
    "build_batch": "batch",
    "build_tiny_model": "models",
    "chunked_forward": "forward",
    "compute_advantages": "advantages",
    "forward_logprobs": "forward",
    "forward_values": "forward",
    "load_critic": "critic",
    "normalized_reward": "batch",
    "training_reward": "batch",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'agentrl.learn' has no attribute {name!r}")
    return getattr(importlib.import_module(f"agentrl.learn.{_WHERE[name]}"), name)


def __dir__() -> list[str]:
    return sorted(__all__)
