"""Field maps from our ``Episode`` to each engine's rollout record, as plain Python (no engine import).

The adapters wrap these in the engine's own types; tests check them with or without the engine.
A trajectory the judge failed on (reward None) is never trained on and never enters a group
baseline: verl gets 0.0 with an all-zero mask and the ``agentrl_excluded`` flag, and its estimator
``agentrl_grpo`` drops such rows from the group statistics; TRL gets None, which its GRPO leaves out
of the group mean and std; SkyRL's generator output must keep every sample, so its whole group is
dropped (every member all-zero rewards and masks: advantage 0, no gradient) and counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentrl.integrations.episode import Episode

__all__ = ["skyrl_generator_output", "trl_rollout_fields", "verl_output_fields"]


def _mask(ep: Episode) -> list[int]:
    return list(ep.record.loss_mask) if ep.reward is not None else [0] * len(ep.record.loss_mask)


def verl_output_fields(ep: Episode) -> dict[str, Any]:
    """The keyword arguments of verl's ``AgentLoopOutput`` (without ``metrics``) for one episode.

    ``prompt_ids`` ``[P]``; ``response_ids``, ``response_mask``, ``response_logprobs`` ``[C]`` (None
    when the engine gave no logprobs);
    ``reward_score`` (verl writes it on the last response token, which is our last policy token);
    ``num_turns`` counts messages (user, assistant, tool), as verl does. ``extra_fields`` keeps what
    verl has no slot for: our per-token scores (per-turn rewards included), turn ids, which
    logprobs are known, the trajectory id and env metrics.
    """
    r = ep.record
    return {
        "prompt_ids": list(r.prompt_ids),
        "response_ids": list(r.completion_ids),
        "response_mask": _mask(ep),
        # None when the server returned no logprobs (rollout.calculate_log_probs off): zeros would
        # read as probability-1 samples in verl's rollout corrections.
        "response_logprobs": list(r.rollout_logprobs) if any(r.logprobs_known) else None,
        "reward_score": 0.0 if ep.reward is None else float(ep.reward),
        "num_turns": len(ep.trajectory.messages),
        "extra_fields": {
            "agentrl_trajectory_id": r.trajectory_id,
            "agentrl_token_level_scores": list(r.token_level_scores),
            "agentrl_turn_ids": list(r.turn_ids),
            "agentrl_logprobs_known": list(r.logprobs_known),
            "agentrl_excluded": ep.reward is None,
            "agentrl_metrics": dict(r.metrics),
        },
    }


def trl_rollout_fields(episodes: Sequence[Episode]) -> dict[str, list[Any]]:
    """The dict a TRL ``rollout_func`` returns, one entry per episode.

    ``prompt_ids`` ``[B][P_b]``, ``completion_ids`` ``[B][C_b]``, ``logprobs`` ``[B][C_b]`` (0.0 on
    observation tokens), ``env_mask`` ``[B][C_b]`` (1 on policy tokens: TRL's tool mask). The rest
    goes to the reward functions as keyword arguments: ``agentrl_trajectory`` (the trajectory as
    JSON, for the judge) and ``agentrl_reward`` (the env's reward, None when not scored yet).
    """
    return {
        "prompt_ids": [list(e.record.prompt_ids) for e in episodes],
        "completion_ids": [list(e.record.completion_ids) for e in episodes],
        "logprobs": [list(e.record.rollout_logprobs) for e in episodes],
        "env_mask": [list(e.record.loss_mask) for e in episodes],
        "agentrl_trajectory": [e.trajectory.model_dump_json() for e in episodes],
        "agentrl_reward": [e.reward for e in episodes],
    }


def _skyrl_group(k: int, ep: Episode, trajectory_ids: Sequence[Any] | None) -> Any:
    """SkyRL's group of sample ``k``: its ``TrajectoryID.instance_id`` (what SkyRL's advantage
    groups by), else the task id."""
    tid = None if trajectory_ids is None else trajectory_ids[k]
    inst = tid.get("instance_id") if isinstance(tid, dict) else getattr(tid, "instance_id", None)
    return ("instance", inst) if inst is not None else ("task", ep.trajectory.task_id)


def skyrl_generator_output(
    episodes: Sequence[Episode], trajectory_ids: Sequence[Any] | None = None
) -> dict[str, Any]:
    """A SkyRL ``GeneratorOutput`` (a dict) with per-token rewards: our ``token_level_scores``.

    ``prompt_token_ids`` ``[B][P_b]``; ``response_ids``, ``rewards``, ``loss_masks``,
    ``rollout_logprobs`` ``[B][C_b]``; ``stop_reasons`` ``[B]``; ``rollout_metrics`` averaged over
    the batch. SkyRL needs one output per input sample and groups them by ``instance_id``, so a
    group with an episode without a usable reward is dropped whole: all its members get all-zero
    rewards and loss masks (advantage 0 under SkyRL's group estimators, no gradient), counted in
    ``agentrl/excluded`` (those episodes), ``agentrl/dropped_groups`` and ``agentrl/dropped_samples``.
    """
    groups = [_skyrl_group(k, e, trajectory_ids) for k, e in enumerate(episodes)]
    bad = {g for g, e in zip(groups, episodes, strict=True) if e.reward is None}
    dropped = [g in bad for g in groups]
    stops = []
    for e in episodes:
        last = next((m for m in reversed(e.trajectory.messages) if m.role == "assistant"), None)
        stops.append("length" if e.record.truncated or last is None else (last.finish_reason or "stop"))
    keys = sorted({k for e in episodes for k in e.record.metrics})
    metrics = {
        f"agentrl/{k}": sum(e.record.metrics.get(k, 0.0) for e in episodes) / max(len(episodes), 1)
        for k in keys
    }
    metrics["agentrl/excluded"] = float(sum(e.reward is None for e in episodes))
    metrics["agentrl/dropped_groups"] = float(len(bad))
    metrics["agentrl/dropped_samples"] = float(sum(dropped))

    def zeros(e: Episode) -> list[Any]:
        return [0] * len(e.record.loss_mask)

    return {
        "prompt_token_ids": [list(e.record.prompt_ids) for e in episodes],
        "response_ids": [list(e.record.completion_ids) for e in episodes],
        "rewards": [
            [0.0] * len(e.record.token_level_scores) if d else list(e.record.token_level_scores)
            for e, d in zip(episodes, dropped, strict=True)
        ],
        "loss_masks": [zeros(e) if d else _mask(e) for e, d in zip(episodes, dropped, strict=True)],
        "stop_reasons": stops,
        "rollout_metrics": metrics,
        "rollout_logprobs": [list(e.record.rollout_logprobs) for e in episodes],
        "trajectory_ids": None if trajectory_ids is None else list(trajectory_ids),
    }
