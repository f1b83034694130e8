"""KL estimators between the policy and the reference, KL controllers, and KL in the reward.

Estimators of KL(π‖π_ref) per token from log-probabilities of the sampled token (Schulman's k1,
k2, k3). ``k3`` is clamped as in verl: log-ratio to [−20, 20], the estimate to [−10, 10].
A kind with a ``+`` suffix (``k3+``) is straight-through: the forward value of the kind with the
gradient of k2, whose gradient is the true KL gradient in expectation.
"""

from __future__ import annotations

import torch

from agentrl.algos.reduce import LOCAL, Reduce
from agentrl.algos.stats import masked_mean

__all__ = [
    "KL_KINDS",
    "AdaptiveKLController",
    "FixedKLController",
    "apply_kl_penalty",
    "kl_penalty",
]

_ALIASES = {"kl": "k1", "mse": "k2", "low_var_kl": "k3"}
KL_KINDS: tuple[str, ...] = ("k1", "abs", "k2", "k3", "k1+", "abs+", "k2+", "k3+")


def kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, kind: str = "k3") -> torch.Tensor:
    """Per-token KL estimate; logprob, ref_logprob: [B, T] → [B, T].

    ``k1`` = log π − log π_ref; ``abs`` = |k1|; ``k2`` = ½·k1²; ``k3`` = exp(−k1) + k1 − 1 (≥ 0,
    low variance). Aliases: ``kl``→k1, ``mse``→k2, ``low_var_kl``→k3.
    """
    if kind.endswith("+"):
        backward = kl_penalty(logprob, ref_logprob, "k2")
        forward = kl_penalty(logprob, ref_logprob, kind[:-1])
        return backward - backward.detach() + forward.detach()
    kind = _ALIASES.get(kind, kind)
    if kind == "k1":
        return logprob - ref_logprob
    if kind == "abs":
        return (logprob - ref_logprob).abs()
    if kind == "k2":
        return 0.5 * (logprob - ref_logprob).square()
    if kind == "k3":
        log_ratio = (ref_logprob - logprob).clamp(-20.0, 20.0)
        # expm1(x) − x is exp(x) − x − 1 without the cancellation that makes tiny KLs negative.
        return (torch.expm1(log_ratio) - log_ratio).clamp(-10.0, 10.0)
    raise ValueError(f"unknown KL kind {kind!r}; expected one of {', '.join(KL_KINDS)}")


class FixedKLController:
    """A constant KL coefficient β."""

    def __init__(self, kl_coef: float) -> None:
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        """No-op: the coefficient is fixed."""


class AdaptiveKLController:
    """Ziegler et al.'s proportional controller: β moves to keep the observed KL near ``target``.

    β ← β · (1 + clip(KL/target − 1, −0.2, 0.2) · n_steps / horizon).
    """

    def __init__(self, init: float, target: float, horizon: float) -> None:
        if target <= 0 or horizon <= 0:
            raise ValueError("AdaptiveKLController needs target > 0 and horizon > 0")
        self.value = float(init)
        self.target = float(target)
        self.horizon = float(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Adjust β after a batch of ``n_steps`` sequences whose mean KL was ``current_kl``."""
        error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon


def apply_kl_penalty(
    token_level_scores: torch.Tensor,
    logprob: torch.Tensor,
    ref_logprob: torch.Tensor,
    response_mask: torch.Tensor,
    controller: FixedKLController | AdaptiveKLController,
    kind: str = "k1",
    *,
    reduce: Reduce = LOCAL,
) -> tuple[torch.Tensor, dict[str, float]]:
    """KL in the reward: token_level_rewards = scores − β·KL_t, with KL only on policy tokens.

    Uses the controller's current β, then updates it with the batch's KL (per-sequence masked mean,
    averaged over the sequences of every rank of ``reduce``) and n_steps = B summed over ranks, so
    every rank's controller moves alike. All inputs [B, T]; returns ``(token_level_rewards
    [B, T], metrics)`` with ``actor/reward_kl_penalty`` (the KL) and ``actor/reward_kl_penalty_coeff`` (β).
    """
    kld = kl_penalty(logprob, ref_logprob, kind) * response_mask
    beta = controller.value
    token_level_rewards = token_level_scores - beta * kld
    per_seq = masked_mean(kld, response_mask, dim=-1)
    total, count = reduce.sum(
        torch.stack([per_seq.sum(), per_seq.new_tensor(float(per_seq.numel()))])
    ).tolist()
    current_kl = total / max(count, 1.0)
    controller.update(current_kl=current_kl, n_steps=round(count))
    return token_level_rewards, {"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": beta}
