"""verl: ``agentrl_grpo``, verl's own GRPO over the trainable samples only, so a judge failure never
enters a group baseline.

Our agent loop hands a trajectory the judge failed on (or left unscored) to verl with
``reward_score`` 0.0 and an all-zero ``response_mask`` (``mapping.verl_output_fields``). verl's stock
group estimators (``grpo``, ``rloo``, ...) take every row of a group into its mean and std, masked
or not, so that 0 would shift its group-mates' advantages. ``agentrl_grpo`` drops the rows without
a policy token first and runs verl's ``compute_grpo_outcome_advantage`` on the rest; dropped rows
get advantage 0. The native trainer drops the same rows (``build_batch``).

An episode whose context was rewritten comes as several outputs of one agent-loop session (one per
context segment, keys ``{uid}_{session}_{k}`` in verl's v1 trainer), each ending in the episode's
reward. verl's v1 advantage step (``compute_advantage_for_multi_trajectories``) scores only a
session's last output and gives every output its advantage, but for verl's own ``grpo`` alone; any
other estimator sees every output as a sample of its own, which would count a segmented episode
once per segment. ``register`` therefore wraps that step so that ``agentrl_grpo`` gets the same
treatment: the group statistics see each episode once (its last segment), and every segment gets
the episode's advantage, as the native trainer does (``agentrl.learn.advantages``). Batches with
one output per session, and every other estimator, go to verl's step unchanged.

verl computes advantages in its driver (the ``TaskRunner`` actor), so the estimator must be
registered there: ``examples/verl/grpo.yaml`` sets ``algorithm.adv_estimator: agentrl_grpo`` and
Ray's ``worker_process_setup_hook: agentrl.integrations.verl_advantage.register``. Imports verl.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

try:
    from verl.trainer.ppo import core_algos
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "agentrl.integrations.verl_advantage needs verl>=0.6 (pip install 'agentrl[verl]')"
    ) from e

__all__ = [
    "ESTIMATOR",
    "agentrl_grpo_advantage",
    "check_estimator",
    "per_episode_advantage",
    "register",
]

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


def _sessions(batch_keys: Sequence[str]) -> tuple[list[str], list[int]]:
    """Each row's session (``{uid}_{session}``) and output index, from verl's v1 keys
    ``{uid}_{session}_{index}``."""
    sessions, indices = [], []
    for key in batch_keys:
        head, _, index = str(key).rpartition("_")
        if not head or not index.isdigit():
            raise ValueError(f"verl batch key {key!r} is not {{uid}}_{{session}}_{{index}}")
        sessions.append(head)
        indices.append(int(index))
    return sessions, indices


def per_episode_advantage(verl_step: Any) -> Any:
    """``verl_step`` (verl's ``compute_advantage_for_multi_trajectories(data, batch_keys,
    adv_estimator, ...)``) with ``agentrl_grpo`` over episodes: where a session has several outputs
    (the context segments of one episode), the estimator runs on each session's last output
    (``[S, T]``) and each row ``[B, T]`` gets its session's advantage times its own
    ``response_mask``; advantages and returns are equal, as in ``agentrl_grpo_advantage``."""
    if getattr(verl_step, "agentrl_per_episode", False):
        return verl_step

    def step(data: Any, batch_keys: Sequence[str], adv_estimator: Any, *args: Any, **kwargs: Any) -> Any:
        name = getattr(adv_estimator, "value", adv_estimator)
        if name != ESTIMATOR:
            return verl_step(data, batch_keys, adv_estimator, *args, **kwargs)
        sessions, indices = _sessions(batch_keys)
        if len(set(sessions)) == len(sessions):  # one output per episode: verl's own path
            return verl_step(data, batch_keys, adv_estimator, *args, **kwargs)
        from verl.trainer.ppo.ray_trainer import compute_advantage

        last: dict[str, int] = {}  # session -> row of its last output
        for i, (sess, k) in enumerate(zip(sessions, indices, strict=True)):
            if sess not in last or indices[last[sess]] < k:
                last[sess] = i
        order = list(last)
        final = compute_advantage(data.select_idxs([last[s] for s in order]), ESTIMATOR, *args, **kwargs)
        adv, mask = final.batch["advantages"], final.batch["response_mask"]
        first = mask.to(torch.int64).argmax(dim=-1)  # the first policy token (0 on an all-masked row)
        per_session = adv[torch.arange(len(order)), first] * (mask.sum(dim=-1) > 0).to(adv.dtype)
        where = {s: j for j, s in enumerate(order)}
        rows = torch.tensor([where[s] for s in sessions], dtype=torch.int64)
        out = per_session[rows][:, None] * data.batch["response_mask"].to(adv.dtype)
        data.batch["advantages"] = out
        data.batch["returns"] = out.clone()
        return data

    step.agentrl_per_episode = True  # type: ignore[attr-defined]
    step.__wrapped__ = verl_step  # type: ignore[attr-defined]
    step.__doc__ = per_episode_advantage.__doc__
    return step


def register() -> None:
    """Register ``agentrl_grpo`` with verl and wrap verl's v1 advantage step with
    ``per_episode_advantage`` (idempotent; verls without a v1 trainer are left as they are); a Ray
    ``worker_process_setup_hook``."""
    if core_algos.ADV_ESTIMATOR_REGISTRY.get(ESTIMATOR) is not agentrl_grpo_advantage:
        core_algos.register_adv_est(ESTIMATOR)(agentrl_grpo_advantage)
    try:
        from verl.trainer.ppo.v1 import utils as v1_utils
    except ImportError:  # pragma: no cover - verl without the v1 trainer: one output per sample
        return
    name = "compute_advantage_for_multi_trajectories"
    wrapped = per_episode_advantage(getattr(v1_utils, name))
    setattr(v1_utils, name, wrapped)
    # the trainer binds the name at its import: rebind it where that already happened
    trainer_base = sys.modules.get("verl.trainer.ppo.v1.trainer_base")
    if trainer_base is not None and hasattr(trainer_base, name):
        setattr(trainer_base, name, per_episode_advantage(getattr(trainer_base, name)))


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
