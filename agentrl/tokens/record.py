"""``TokenTrajectory``: the engine-neutral record of one episode, split at the first generated token.

Every rollout/training engine adapter (vLLM, verl, TRL, SkyRL) maps from this one record: the
prompt ids the engine fed, the completion ids that followed (the policy's sampled tokens and the
observation tokens in between, exactly as in the training row), a loss mask over the completion,
the rollout's log-probabilities (0.0 wherever the policy did not sample or the value is unknown),
token-level scores, the scalar reward, the turn count and a few metrics. Plain Python lists, so
it serialises to JSON and converts to any engine's tensors without a dependency.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from agentrl.tokens.arrays import TokenizedTrajectory
from agentrl.trajectory import Trajectory, training_reward

__all__ = ["TokenTrajectory", "token_trajectory"]

# Numeric env metadata copied into ``metrics`` when a trajectory carries it.
_INFO_METRICS = ("tool_calls", "format_errors", "unknown_tools", "arg_errors", "tool_errors", "elapsed_s")


@dataclass(frozen=True)
class TokenTrajectory:
    """One episode as prompt + completion token lists (``P`` prompt tokens, ``C`` completion tokens).

    - ``prompt_ids`` ``[P]``: the ids before the first generated token (system, user, the first
      generation prompt), as the engine fed them.
    - ``completion_ids`` ``[C]``: everything after: sampled turns exactly as sampled, tool
      observations with their template wrappers, later generation prompts.
    - ``loss_mask`` ``[C]``: 1 on tokens the policy sampled (its stop token included), else 0.
    - ``rollout_logprobs`` ``[C]``: the sampler's log p(token); 0.0 on observation tokens and on
      turns whose logprobs are unknown (``logprobs_known`` says which).
    - ``logprobs_known`` ``[C]``: 1 where ``loss_mask`` is 1 and the sampler's log-prob was recorded.
    - ``token_level_scores`` ``[C]``: the reward on the last policy token (plus per-turn rewards).
    - ``turn_ids`` ``[C]``: the assistant turn that produced each token, or -1.
    - ``reward``: the scalar episode reward (null when the trajectory is unscored or a judge error).
    - ``num_turns``: assistant turns; ``truncated``: the row was cut (max_len or generation limit);
      ``metrics``: numeric per-episode figures (env counters, lengths).
    """

    trajectory_id: str
    prompt_ids: list[int]
    completion_ids: list[int]
    loss_mask: list[int]
    rollout_logprobs: list[float]
    logprobs_known: list[int]
    token_level_scores: list[float]
    turn_ids: list[int]
    reward: float | None
    num_turns: int
    truncated: bool = False
    metrics: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.completion_ids)
        for name in ("loss_mask", "rollout_logprobs", "logprobs_known", "token_level_scores", "turn_ids"):
            got = len(getattr(self, name))
            if got != n:
                raise ValueError(f"TokenTrajectory.{name} has {got} entries, completion_ids has {n}")

    @property
    def input_ids(self) -> list[int]:
        """``[P + C]``: the whole row (prompt then completion), as the trainer sees it."""
        return [*self.prompt_ids, *self.completion_ids]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return asdict(self)


def token_trajectory(
    row: TokenizedTrajectory, trajectory: Trajectory | None = None, *, reward: float | None = None
) -> TokenTrajectory:
    """Split an expander row at ``prompt_len`` into the engine-neutral record.

    ``row`` holds ``[L]`` arrays; the result has ``P = row.prompt_len`` prompt ids and ``C = L - P``
    completion entries per list. ``reward`` overrides the scalar reward (an adapter passes the
    ``training_reward`` it gave the expander); otherwise it is what the expander places by default,
    ``training_reward(trajectory, normalize=False)``: the rubric total, None when not trainable. ``trajectory`` supplies the
    turn count and env metrics; without it ``num_turns`` counts the distinct turns in the row.
    """
    P = row.prompt_len
    if reward is None and trajectory is not None:
        reward = training_reward(trajectory, normalize=False)
    turn_ids = row.turn_ids[P:].tolist()
    metrics: dict[str, float] = {}
    if trajectory is not None:
        num_turns = sum(1 for m in trajectory.messages if m.role == "assistant")
        for key in _INFO_METRICS:
            value = trajectory.info.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                metrics[f"env/{key}"] = float(value)
        metrics["env/terminated"] = float(bool(trajectory.info.get("terminated")))
    else:
        num_turns = len({t for t in turn_ids if t >= 0})
    mask = row.loss_mask[P:]
    metrics["prompt_length"] = float(P)
    metrics["response_length"] = float(len(row) - P)
    metrics["policy_tokens"] = float(mask.sum())
    return TokenTrajectory(
        trajectory_id=row.trajectory_id,
        prompt_ids=row.input_ids[:P].tolist(),
        completion_ids=row.input_ids[P:].tolist(),
        loss_mask=mask.tolist(),
        rollout_logprobs=[float(x) for x in (row.old_logprobs[P:] * (mask > 0))],
        logprobs_known=row.known_logprob_mask()[P:].tolist(),
        token_level_scores=[float(x) for x in row.token_level_scores[P:]],
        turn_ids=turn_ids,
        reward=reward,
        num_turns=num_turns,
        truncated=bool(row.truncated),
        metrics=metrics,
    )
