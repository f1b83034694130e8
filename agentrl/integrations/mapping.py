"""Field maps from our ``Episode`` to each engine's rollout record, as plain Python (no engine import).

The adapters wrap these in the engine's own types; tests check them with or without the engine.
A trajectory the judge failed on (reward None) must not be trained on: engines that take a scalar
reward get 0.0 and an all-zero loss mask for it (no gradient), plus an ``agentrl_excluded`` flag.
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


def skyrl_generator_output(
    episodes: Sequence[Episode], trajectory_ids: Sequence[Any] | None = None
) -> dict[str, Any]:
    """A SkyRL ``GeneratorOutput`` (a dict) with per-token rewards: our ``token_level_scores``.

    ``prompt_token_ids`` ``[B][P_b]``; ``response_ids``, ``rewards``, ``loss_masks``,
    ``rollout_logprobs`` ``[B][C_b]``; ``stop_reasons`` ``[B]``; ``rollout_metrics`` averaged over
    the batch. Episodes without a usable reward get an all-zero loss mask.
    """
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
    return {
        "prompt_token_ids": [list(e.record.prompt_ids) for e in episodes],
        "response_ids": [list(e.record.completion_ids) for e in episodes],
        "rewards": [list(e.record.token_level_scores) for e in episodes],
        "loss_masks": [_mask(e) for e in episodes],
        "stop_reasons": stops,
        "rollout_metrics": metrics,
        "rollout_logprobs": [list(e.record.rollout_logprobs) for e in episodes],
        "trajectory_ids": None if trajectory_ids is None else list(trajectory_ids),
    }
