"""The algorithm settings of an RL update (the ``algorithm`` block of ``agentrl train``'s config)."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["AlgorithmConfig", "DynamicSamplingConfig", "OverlongConfig", "RolloutCorrectionConfig"]


class _Block(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class DynamicSamplingConfig(_Block):
    """DAPO's dynamic sampling (verl's ``algorithm.filter_groups``): drop the groups whose rewards
    are all equal and sample more tasks until the step has ``rollout.tasks_per_step`` groups."""

    enable: bool = Field(False, description="drop zero-variance groups and refill the batch with more tasks")
    max_rounds: int = Field(
        4,
        ge=1,
        description="rollout rounds per step at most (the first included); then train on what is kept",
    )


class OverlongConfig(_Block):
    """DAPO's overlong reward shaping (verl's ``reward_model.overlong_buffer``) and overlong filtering."""

    enable: bool = Field(False, description="add the soft overlong penalty to the reward")
    len: int = Field(
        16, ge=1, description="buffer length: the penalty grows over this many tokens before max_tokens"
    )
    penalty_factor: float = Field(1.0, ge=0, description="the penalty at max_tokens (reward − factor)")
    max_tokens: int | None = Field(
        None,
        ge=1,
        description="response-length limit the buffer ends at, in policy tokens; null = rollout.max_turns × "
        "rollout.max_new_tokens (the trainer fills it in)",
    )
    mask_truncated: bool = Field(
        False, description="leave episodes cut by a budget (no report) out of the policy loss"
    )


class RolloutCorrectionConfig(_Block):
    """verl's ``algorithm.rollout_correction``: truncated importance-sampling weights and rejection
    masks between the sampler's log-probs and the trainer's recomputed old log-probs, applied in
    the policy loss."""

    rollout_is: Literal["token", "sequence"] | None = Field(
        None, description="IS weight level: token, sequence (product over the sequence), or null = none"
    )
    rollout_is_threshold: float = Field(2.0, gt=0, description="IS weights are truncated at this value")
    rollout_is_batch_normalize: bool = Field(
        False, description="rescale the IS weights to mean 1 over the batch"
    )
    rollout_rs: str | None = Field(
        None,
        description="rejection, comma-separated verl options: token_k1/k2/k3, seq_sum_k1/k2/k3, seq_mean_k1/k2/k3, "
        "seq_max_k2/k3 (k1 = −log r, k2 = ½(log r)², k3 = r − 1 − log r, r = π_trainer / π_rollout); null = none",
    )
    rollout_rs_threshold: str | float | None = Field(
        None,
        description="one threshold, or one per rollout_rs option (comma-separated); k1 options take "
        "'lower_upper' ratio bounds (or one upper bound u, lower = 1/u), k2/k3 an upper bound",
    )

    @property
    def enabled(self) -> bool:
        return self.rollout_is is not None or self.rollout_rs is not None

    @model_validator(mode="after")
    def _check(self) -> RolloutCorrectionConfig:
        if self.rollout_rs is not None:
            from agentrl.algos.rollout_correction import parse_rs_options

            try:
                parse_rs_options(self.rollout_rs, self.rollout_rs_threshold)
            except ValueError as e:
                raise ValueError(str(e)) from None
        return self


#: The advantage estimators ``algorithm.name`` takes (the CLI's ``--algorithm`` choices come from here).
Estimator = Literal["ppo", "grpo", "rloo", "reinforce_pp"]
ESTIMATORS: tuple[str, ...] = get_args(Estimator)
#: The estimators that need a critic (values for GAE); the others are baselines over a group or batch.
CRITIC_ESTIMATORS = frozenset({"ppo"})


class AlgorithmConfig(BaseModel):
    """The ``algorithm`` block of a training config: the advantage estimator, its losses and the
    batching of the update. The trainer and ``agentrl replay`` validate the same class."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    @property
    def needs_critic(self) -> bool:
        """Whether this estimator needs a critic's values (``CRITIC_ESTIMATORS``)."""
        return self.name in CRITIC_ESTIMATORS

    name: Estimator = Field("grpo", description="advantage estimator")
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
    policy_loss: Literal["vanilla", "gspo"] = Field(
        "vanilla",
        description="vanilla = PPO's token ratio and clip (dual clip too); gspo = GSPO's sequence-level "
        "ratio and clip (set clip_low/clip_high to GSPO's scale, e.g. 3e-4/4e-4)",
    )
    dynamic_sampling: DynamicSamplingConfig = Field(
        default_factory=DynamicSamplingConfig,
        description="DAPO's dynamic sampling (verl's algorithm.filter_groups): drop the groups whose "
        "rewards are all equal and sample more tasks until the step has rollout.tasks_per_step groups",
    )
    overlong: OverlongConfig = Field(
        default_factory=OverlongConfig,
        description="DAPO's overlong reward shaping (verl's reward_model.overlong_buffer) and overlong "
        "filtering",
    )
    rollout_correction: RolloutCorrectionConfig = Field(
        default_factory=RolloutCorrectionConfig,
        description="verl's algorithm.rollout_correction: truncated importance-sampling weights and "
        "rejection masks between the sampler's and the trainer's old log-probs, in the policy loss",
    )
    recompute_old_logprobs: Literal["auto", "always", "never"] = Field(
        "auto",
        description="recompute old log-probs with a forward pass: auto = where the rollout's are unknown, "
        "sampled with top-p < 1 or one step behind (staleness 1); always; never = the sampler's, and no "
        "forward pass when every policy token has one (no actor/rollout_logprob_diff then); with "
        "rollout_correction they are always recomputed (it compares the two)",
    )
