"""verl: ``agentrl_grpo``, verl's own GRPO over the trainable samples only, so a judge failure never
enters a group baseline.

Our agent loop hands a trajectory the judge failed on (or left unscored) to verl with
``reward_score`` 0.0 and an all-zero ``response_mask`` (``mapping.verl_output_fields``). verl's stock
group estimators (``grpo``, ``rloo``, ...) take every row of a group into its mean and std, masked
or not, so that 0 would shift its group-mates' advantages. ``agentrl_grpo`` drops the rows without
a policy token first and runs verl's ``compute_grpo_outcome_advantage`` on the rest; dropped rows
get advantage 0. The native trainer drops the same rows (``build_batch``).

verl computes advantages in its driver (the ``TaskRunner`` actor), so the estimator must be
registered there: ``examples/verl/grpo.yaml`` sets ``algorithm.adv_estimator: agentrl_grpo`` and
Ray's ``worker_process_setup_hook: agentrl.integrations.verl_advantage.register``. Imports verl.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import torch

try:
    from verl.trainer.ppo import core_algos
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "agentrl.integrations.verl_advantage needs verl>=0.6 (pip install 'agentrl[verl]')"
    ) from e

__all__ = ["ESTIMATOR", "agentrl_grpo_advantage", "check_estimator", "register"]

ESTIMATOR = "agentrl_grpo"


def agentrl_grpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's GRPO (``config.norm_adv_by_std_in_grpo`` as in verl) over the rows with a policy token.

    token_level_rewards, response_mask: ``[B, T]``; index: ``[B]`` group ids (verl's ``uid``) →
    (advantages, returns), both ``[B, T]``, 0 on every row whose ``response_mask`` is all zero.
    """
    norm = True if config is None else bool(config.get("norm_adv_by_std_in_grpo", True))
    keep = torch.nonzero(response_mask.sum(dim=-1) > 0).flatten()
    adv = torch.zeros_like(token_level_rewards)
    if keep.numel():
        got, _ = core_algos.compute_grpo_outcome_advantage(
            token_level_rewards=token_level_rewards[keep],
            response_mask=response_mask[keep],
            index=np.asarray(index)[keep.cpu().numpy()],
            epsilon=epsilon,
            norm_adv_by_std_in_grpo=norm,
        )
        adv[keep] = got.to(adv.dtype)
    return adv, adv


def register() -> None:
    """Register ``agentrl_grpo`` with verl (idempotent); a Ray ``worker_process_setup_hook``."""
    if core_algos.ADV_ESTIMATOR_REGISTRY.get(ESTIMATOR) is not agentrl_grpo_advantage:
        core_algos.register_adv_est(ESTIMATOR)(agentrl_grpo_advantage)


def check_estimator(name: Any) -> str | None:
    """Why verl's ``algorithm.adv_estimator`` ``name`` would let a judge failure into a group
    baseline (a registered estimator other than ours that groups by ``index``), or None."""
    name = getattr(name, "value", name)
    fn = core_algos.ADV_ESTIMATOR_REGISTRY.get(str(name)) if name is not None else None
    if fn is None or name == ESTIMATOR or "index" not in inspect.signature(fn).parameters:
        return None
    return (
        f"algorithm.adv_estimator={name} puts the 0 of an episode the judge failed on into its group's "
        f"baseline; use algorithm.adv_estimator={ESTIMATOR} (docs/integrations.md)"
    )


register()
