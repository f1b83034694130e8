"""SkyRL training with our env and our token layout: SkyRL's PPO/GRPO trainer, our ResearchGenerator.

    python -m agentrl.integrations.task_data --engine skyrl --out data/agentrl/train.parquet
    python -m agentrl.integrations.task_data --engine skyrl --out data/agentrl/val.parquet --limit 64
    python examples/skyrl/main_agentrl.py \
        data.train_data="['data/agentrl/train.parquet']" data.val_data="['data/agentrl/val.parquet']" \
        environment.env_class=agentrl-deep-research trainer.policy.model.path=Qwen/Qwen3-4B-Instruct-2507 \
        trainer.algorithm.advantage_estimator=grpo generator.n_samples_per_prompt=8 \
        generator.sampling_params.logprobs=0

The generator runs each episode token-in-token-out through SkyRL's inference client and returns our
expander's ids, loss masks, logprobs and per-token rewards. ``register_env`` also makes
``agentrl-deep-research`` available to SkyRL's stock generator. Needs skyrl-train (Python 3.12).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

SETTINGS = Path(__file__).with_name("agentrl.yaml")


def make_generator(
    tokenizer: Any,
    inference_engine_client: Any,
    *,
    max_completion_tokens: int = 8192,
    model: str | None = None,
) -> Any:
    """Our generator over SkyRL's inference client, with this folder's ``agentrl.yaml`` settings."""
    from agentrl.integrations.skyrl import ResearchGenerator, register_env

    register_env()
    return ResearchGenerator(
        inference_engine_client, tokenizer, SETTINGS, max_completion_tokens=max_completion_tokens, model=model
    )


def main() -> None:
    """SkyRL's entry point (``skyrl.train.entrypoints.main_base``) with ``get_generator`` overridden."""
    import ray
    from skyrl.train.config import SkyRLTrainConfig
    from skyrl.train.entrypoints.main_base import BasePPOExp
    from skyrl.train.utils import validate_cfg
    from skyrl.train.utils.utils import initialize_ray

    class AgentRLExp(BasePPOExp):
        def get_generator(self, cfg: Any, tokenizer: Any, inference_engine_client: Any) -> Any:
            budget = cfg.generator.max_turns * cfg.generator.sampling_params.max_generate_length
            return make_generator(tokenizer, inference_engine_client, max_completion_tokens=budget)

    @ray.remote(num_cpus=1)
    def entrypoint(cfg: SkyRLTrainConfig) -> None:
        AgentRLExp(cfg).run()

    cfg = SkyRLTrainConfig.from_cli_overrides(sys.argv[1:])
    validate_cfg(cfg)
    initialize_ray(cfg)
    ray.get(entrypoint.remote(cfg))


if __name__ == "__main__":
    main()
