"""Training (layer 4): PPO and GRPO on transformers models — config, models, rollouts, updates, logs.

``Trainer(load_train_config("examples/quickstart.yaml")).run()`` or ``agentrl train CONFIG.yaml``.
"""

from agentrl.train.config import TrainConfig, load_train_config
from agentrl.train.scoring import normalized_reward
from agentrl.train.trainer import Trainer

__all__ = ["TrainConfig", "Trainer", "load_train_config", "normalized_reward"]
