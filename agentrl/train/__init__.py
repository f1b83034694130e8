"""Training (layer 4): PPO and GRPO on transformers models — the loop, its config, the models, the
warm start, checkpoints, logs and the ranks of a distributed run; and a run read back: how it samples
(``read_run_sampling``) and its policy (``load_hf_policy``, ``agentrl rollout --policy hf:RUN``).

``Trainer(load_train_config("examples/quickstart.yaml")).run()`` or ``agentrl train CONFIG.yaml``.
Names are imported on first use, so that the config and its checks load without torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "RunSampling",
    "TrainConfig",
    "Trainer",
    "load_hf_policy",
    "load_train_config",
    "normalized_reward",
    "read_run_sampling",
]

_WHERE = {
    "TrainConfig": "config",
    "Trainer": "trainer",
    "load_train_config": "config",
    "RunSampling": "run_sampling",
    "read_run_sampling": "run_sampling",
    "load_hf_policy": "hf_policy",
    "normalized_reward": "agentrl.learn.batch",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'agentrl.train' has no attribute {name!r}")
    where = _WHERE[name]
    return getattr(importlib.import_module(where if "." in where else f"agentrl.train.{where}"), name)


def __dir__() -> list[str]:
    return sorted(__all__)
