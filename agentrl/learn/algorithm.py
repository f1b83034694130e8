"""The algorithm settings of an RL update (the ``algorithm`` block of ``agentrl train``'s config)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["AlgorithmConfig"]


class AlgorithmConfig(BaseModel):
    """The ``algorithm`` block of a training config: the advantage estimator, its losses and the
    batching of the update. The trainer and ``agentrl replay`` validate the same class."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    name: Literal["ppo", "grpo", "rloo", "reinforce_pp"] = Field("grpo", description="advantage estimator")
    gamma: float = Field(1.0, ge=0, le=1, description="discount γ")
    lam: float = Field(0.95, ge=0, le=1, description="GAE λ (PPO)")
    norm_adv_by_std: bool = Field(True, description="GRPO: divide by the group std (False = Dr. GRPO)")
    whiten_advantages: bool = Field(True, description="PPO: whiten GAE advantages over the batch")
    clip_low: float = Field(0.2, ge=0, description="PPO ratio clip below 1")
    clip_high: float = Field(0.28, ge=0, description="PPO ratio clip above 1 (clip-higher)")
    clip_c: float | None = Field(
        3.0, gt=1, description="dual-clip constant for negative advantages; null = off"
    )
    value_clip: float | None = Field(0.5, ge=0, description="value-loss clip range; null = off")
    kl_kind: str = Field("k3", description="KL estimator: k1, abs, k2, k3 (+ suffix = straight-through)")
    kl_in_reward: bool = Field(False, description="subtract β·KL from token rewards (PPO style)")
    kl_loss_coef: float = Field(0.0, ge=0, description="β of a KL loss term (GRPO style); 0 = none")
    kl_coef: float = Field(0.001, ge=0, description="β of KL in reward (initial value when adaptive)")
    kl_target: float | None = Field(None, gt=0, description="adaptive KL controller target; null = fixed β")
    kl_horizon: float = Field(10000, gt=0, description="adaptive KL controller horizon")
    entropy_coef: float = Field(0.0, description="entropy bonus coefficient")
    vf_coef: float = Field(1.0, ge=0, description="value-loss weight (shared critic backbone)")
    loss_agg: Literal[
        "token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"
    ] = Field("token-mean", description="loss aggregation mode")
    ppo_epochs: int = Field(1, ge=1, description="passes over each batch")
    mini_batch_size: int = Field(16, ge=1, description="trajectories per optimiser step")
    micro_batch_tokens: int = Field(4096, ge=16, description="token budget of one forward/backward")
    pack_sequences: bool = Field(
        True, description="pack several trajectories into one row per forward pass (position ids restart)"
    )
    recompute_old_logprobs: Literal["auto", "always", "never"] = Field(
        "auto",
        description="recompute old log-probs with a forward pass: auto = where the rollout's are unknown "
        "or were sampled at a temperature other than 1",
    )
