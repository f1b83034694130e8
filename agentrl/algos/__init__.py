"""Token-level RL math in torch (layer 0: no model code, no other agentrl imports).

Tensors are [B, T] with ``response_mask`` 1 on policy tokens (tokens the policy sampled) and 0 on
prompts, tool observations, template tokens and padding. Semantics follow verl's ``core_algos``
on policy tokens; where agentrl differs (skipping rather than resetting at observations in
REINFORCE++, zeros for singleton GRPO groups, no exception for one-token variances) the function's
docstring says so.
"""

from agentrl.algos.advantages import (
    discounted_reverse_cumsum,
    gae,
    grpo_advantages,
    reinforce_pp_advantages,
    rloo_advantages,
    td_residuals,
)
from agentrl.algos.kl import KL_KINDS, AdaptiveKLController, FixedKLController, apply_kl_penalty, kl_penalty
from agentrl.algos.losses import (
    AGG_MODES,
    agg_loss,
    entropy_from_logits,
    logprobs_from_logits,
    policy_loss,
    policy_loss_gspo,
    value_loss,
)
from agentrl.algos.stats import EPS, explained_variance, masked_mean, masked_sum, masked_var, masked_whiten

__all__ = [
    "AGG_MODES",
    "EPS",
    "KL_KINDS",
    "AdaptiveKLController",
    "FixedKLController",
    "agg_loss",
    "apply_kl_penalty",
    "discounted_reverse_cumsum",
    "entropy_from_logits",
    "explained_variance",
    "gae",
    "grpo_advantages",
    "kl_penalty",
    "logprobs_from_logits",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "policy_loss",
    "policy_loss_gspo",
    "reinforce_pp_advantages",
    "rloo_advantages",
    "td_residuals",
    "value_loss",
]
