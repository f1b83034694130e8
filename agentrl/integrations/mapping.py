"""Field maps from our ``Episode`` to each engine's rollout record, as plain Python (no engine import).

The adapters wrap these in the engine's own types; tests check them with or without the engine.
A trajectory the judge failed on (reward None) is never trained on and never enters a group
baseline: verl gets 0.0 with an all-zero mask and the ``agentrl_excluded`` flag, and its estimator
``agentrl_grpo`` drops such rows from the group statistics; TRL gets None, which its GRPO leaves out
of the group mean and std; SkyRL's generator output must keep every sample, so its whole group is
dropped (every member all-zero rewards and masks: advantage 0, no gradient) and counted.

An episode whose context was rewritten (``Episode.segmented``) is one sample per context segment,
each exactly its row (``agentrl.tokens.expand_segments``) and each carrying the episode's reward:
verl gets a list of outputs (its v1 agent-loop worker takes several per episode), SkyRL step-wise
entries (``is_last_step`` on the episode's last segment), and TRL, whose rollout function gives one
completion per prompt, refuses it (``SegmentedEpisodeError``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentrl.errors import ConfigError
from agentrl.integrations.episode import Episode
from agentrl.tokens import TokenTrajectory

__all__ = [
    "SegmentedEpisodeError",
    "skyrl_generator_output",
    "trl_rollout_fields",
    "verl_output_fields",
    "verl_outputs",
]


class SegmentedEpisodeError(ConfigError):
    """An episode split into context segments handed to an engine that takes one sample per episode."""


def _mask(ep: Episode, record: TokenTrajectory | None = None) -> list[int]:
    r = ep.record if record is None else record
    return list(r.loss_mask) if ep.reward is not None else [0] * len(r.loss_mask)


def verl_outputs(ep: Episode) -> list[dict[str, Any]]:
    """verl's ``AgentLoopOutput`` keyword arguments for each sample of ``ep``: ``[verl_output_fields(ep)]``
    for an episode that was never rewritten; one per context segment otherwise, each exactly its
    row's ids, mask and logprobs, all with the episode's ``reward_score``, and in ``extra_fields``
    ``agentrl_trajectory_id`` (the row id, ``ID#k`` for segment k > 0), ``agentrl_episode_id``,
    ``agentrl_segment`` and ``agentrl_segments``. ``reward_extra_info`` is set (empty): verl's v1
    worker copies the last output's onto the earlier ones. verl groups by ``uid`` and counts each
    episode once with ``agentrl_grpo`` (``verl_advantage``)."""
    if not ep.segmented:
        return [verl_output_fields(ep)]
    out = []
    for k, r in enumerate(ep.records):
        fields = verl_output_fields(ep, r)
        fields["extra_fields"].update(
            agentrl_episode_id=ep.trajectory.id,
            agentrl_segment=k,
            agentrl_segments=len(ep.records),
            reward_extra_info={},
        )
        out.append(fields)
    return out


def verl_output_fields(ep: Episode, record: TokenTrajectory | None = None) -> dict[str, Any]:
    """The keyword arguments of verl's ``AgentLoopOutput`` (without ``metrics``) for one episode
    (``record``: one of its segments' records, default ``ep.record``).

    ``prompt_ids`` ``[P]``; ``response_ids``, ``response_mask``, ``response_logprobs`` ``[C]`` (None
    when the engine gave no logprobs);
    ``reward_score`` (verl writes it on the last response token, which is our last policy token);
    ``num_turns`` counts messages (user, assistant, tool), as verl does. ``extra_fields`` keeps what
    verl has no slot for: our per-token scores (per-turn rewards included), turn ids, which
    logprobs are known, the trajectory id and env metrics.
    """
    r = ep.record if record is None else record
    return {
        "prompt_ids": list(r.prompt_ids),
        "response_ids": list(r.completion_ids),
        "response_mask": _mask(ep, r),
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

    TRL's GRPO takes exactly one completion per prompt and groups ``num_generations`` consecutive
    ones, so an episode split into context segments cannot be handed over: ``SegmentedEpisodeError``.
    """
    for e in episodes:
        if e.segmented:
            raise SegmentedEpisodeError(
                f"episode {e.trajectory.id} was split into {len(e.records)} context segments, but TRL's "
                "rollout_func takes one completion per prompt: run TRL with context strategy 'none' "
                "(long episodes then end at max_len), or train segmented episodes with agentrl's "
                "trainer, verl or SkyRL step-wise (docs/integrations.md)"
            )
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


def _skyrl_stop(ep: Episode, record: TokenTrajectory, last: bool, j: int = -1) -> str:
    """SkyRL's stop reason of sample ``j`` of ``ep``: ``length`` when the episode was truncated (on
    its last sample), else the finish reason of the sample's last sampled turn (a segment's notes
    included)."""
    if last and ep.record.truncated:
        return "length"
    if ep.finishes:
        return ep.finishes[j] or "stop"
    turns = [m for m in ep.trajectory.messages if m.role == "assistant"]
    turn = max(record.turn_ids, default=-1) if not last else len(turns) - 1
    if not 0 <= turn < len(turns):
        return "length"
    return turns[turn].finish_reason or "stop"


def skyrl_generator_output(
    episodes: Sequence[Episode], trajectory_ids: Sequence[Any] | None = None, *, step_wise: bool = False
) -> dict[str, Any]:
    """A SkyRL ``GeneratorOutput`` (a dict) with per-token rewards: our ``token_level_scores``.

    ``prompt_token_ids`` ``[N][P_n]``; ``response_ids``, ``rewards``, ``loss_masks``,
    ``rollout_logprobs`` ``[N][C_n]``; ``stop_reasons`` ``[N]``; ``rollout_metrics`` averaged over
    the episodes. SkyRL groups samples by ``instance_id``, so a group with an episode without a
    usable reward is dropped whole: all its members get all-zero rewards and loss masks (advantage
    0 under SkyRL's group estimators, no gradient), counted in ``agentrl/excluded`` (those
    episodes), ``agentrl/dropped_groups`` and ``agentrl/dropped_samples``.

    Without ``step_wise`` there is one sample per episode (N = B, SkyRL's default contract) and an
    episode split into context segments raises ``SegmentedEpisodeError``. With ``step_wise``
    (SkyRL's ``generator.step_wise_trajectories``) each episode is its samples in order, one per
    context segment (one when it was never rewritten), with its ``trajectory_ids`` entry repeated
    and ``is_last_step`` ``[N]`` true on its last: SkyRL computes a trajectory's advantage from its
    last step alone and gives it to every step, so every segment gets the episode's advantage and
    each episode counts once in its group.
    """
    if not step_wise:
        seg = next((e for e in episodes if e.segmented), None)
        if seg is not None:
            raise SegmentedEpisodeError(
                f"episode {seg.trajectory.id} was split into {len(seg.records)} context segments: "
                "SkyRL takes them as step-wise samples; set generator.step_wise_trajectories=true "
                "and build ResearchGenerator(..., step_wise=True) (docs/integrations.md)"
            )
    groups = [_skyrl_group(k, e, trajectory_ids) for k, e in enumerate(episodes)]
    bad = {g for g, e in zip(groups, episodes, strict=True) if e.reward is None}
    # (episode index, record, last of its episode) per sample, in episode order
    samples = [
        (k, r, j == len(e.records) - 1) for k, e in enumerate(episodes) for j, r in enumerate(e.records)
    ]
    index = [j for e in episodes for j in range(len(e.records))]  # each sample's row in its episode
    dropped = [groups[k] in bad for k, _, _ in samples]
    keys = sorted({k for e in episodes for k in e.record.metrics})
    metrics = {
        f"agentrl/{k}": sum(e.record.metrics.get(k, 0.0) for e in episodes) / max(len(episodes), 1)
        for k in keys
    }
    metrics["agentrl/excluded"] = float(sum(e.reward is None for e in episodes))
    metrics["agentrl/dropped_groups"] = float(len(bad))
    metrics["agentrl/dropped_samples"] = float(sum(dropped))

    out: dict[str, Any] = {
        "prompt_token_ids": [list(r.prompt_ids) for _, r, _ in samples],
        "response_ids": [list(r.completion_ids) for _, r, _ in samples],
        "rewards": [
            [0.0] * len(r.token_level_scores) if d else list(r.token_level_scores)
            for (_, r, _), d in zip(samples, dropped, strict=True)
        ],
        "loss_masks": [
            [0] * len(r.loss_mask) if d else _mask(episodes[k], r)
            for (k, r, _), d in zip(samples, dropped, strict=True)
        ],
        "stop_reasons": [
            _skyrl_stop(episodes[k], r, last, j) for (k, r, last), j in zip(samples, index, strict=True)
        ],
        "rollout_metrics": metrics,
        "rollout_logprobs": [list(r.rollout_logprobs) for _, r, _ in samples],
        "trajectory_ids": None if trajectory_ids is None else [trajectory_ids[k] for k, _, _ in samples],
    }
    if step_wise:
        out["is_last_step"] = [last for _, _, last in samples]
    return out
