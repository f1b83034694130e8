"""One episode, engine-neutral: our env, our expander's ids, any engine's token-in-token-out generate.

Every adapter (verl, TRL, SkyRL) runs the same loop and only maps its result. Each turn the engine is
fed ``Expander.generation_prompt_ids(env.messages)``: the training row so far plus the generation
prompt, earlier turns exactly as sampled. The sampled ids go back to the env as the assistant
message (text decoded only for the env's parser). The finished trajectory is scored (the env's
deterministic rubric, or our LLM judge when the env could not) and expanded by the same expander,
so the ids, masks, logprobs and scores an adapter hands over are the expander's, never a re-render.

The record is cut after its last policy token: what follows it (the template's end-of-turn tail, or
an observation the episode was truncated on) has no loss and nothing conditions on it, and engines
put a scalar reward on their last response token (verl ``rm_scores``) or judge a completion by its
last token (TRL's EOS check); after the cut those are our last policy token.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from agentrl.env import ResearchEnv
from agentrl.env.suite import Task
from agentrl.tokens import Expander, TokenizedTrajectory, TokenTrajectory, sampled_message, token_trajectory
from agentrl.trajectory import Trajectory

__all__ = [
    "Episode",
    "GenerateFn",
    "Generation",
    "cut_after_last_policy_token",
    "judge_if_needed",
    "run_episode",
]


@dataclass(frozen=True)
class Generation:
    """One sampled turn from an engine: ``token_ids`` ``[T]`` as sampled (stop token included when
    one was sampled), the sampler's ``logprobs`` ``[T]`` (None when the engine gives none) and
    ``finish_reason`` (``"stop"`` or ``"length"``)."""

    token_ids: list[int]
    logprobs: list[float] | None
    finish_reason: str


# ``generate(prompt_ids, max_tokens)``: the engine's token-in-token-out call for one turn.
GenerateFn = Callable[[list[int], int], Awaitable[Generation]]


@dataclass
class Episode:
    """A finished episode: the ``trajectory`` (scored when possible), the expander's ``row`` for it
    (``[L]`` arrays), the engine-neutral ``record`` (prompt ``[P]`` + completion ``[C]``, cut
    after the last policy token), and the seconds spent in the engine and in the env."""

    trajectory: Trajectory
    row: TokenizedTrajectory
    record: TokenTrajectory
    generate_s: float = 0.0
    env_s: float = 0.0

    @property
    def reward(self) -> float | None:
        """The scalar reward, or None when the trajectory must not be trained on (judge error)."""
        return self.record.reward


def cut_after_last_policy_token(record: TokenTrajectory) -> TokenTrajectory:
    """The record with every completion list cut after its last ``loss_mask = 1`` entry (unchanged
    when there is none). Scores never sit after that token, so nothing trainable is lost."""
    on = [i for i, m in enumerate(record.loss_mask) if m]
    if not on:
        return record
    n = on[-1] + 1
    metrics = {**record.metrics, "response_length": float(n)}
    return replace(
        record,
        completion_ids=record.completion_ids[:n],
        loss_mask=record.loss_mask[:n],
        rollout_logprobs=record.rollout_logprobs[:n],
        logprobs_known=record.logprobs_known[:n],
        token_level_scores=record.token_level_scores[:n],
        turn_ids=record.turn_ids[:n],
        metrics=metrics,
    )


async def judge_if_needed(trajectory: Trajectory, judge: Any | None) -> None:
    """Score, in place, a trajectory the env left to the LLM judge (``info["needs_judge"]``) with our
    ``agentrl.judge.Judge``; without a judge it stays unscored (reward None, never a silent 0)."""
    if not trajectory.info.get("needs_judge") or judge is None:
        return
    from agentrl.judge import resolve_rubric

    trajectory.reward = await judge.score(trajectory, resolve_rubric(trajectory, None))
    trajectory.info["needs_judge"] = False


async def run_episode(
    env: ResearchEnv,
    expander: Expander,
    generate: GenerateFn,
    *,
    task: Task | str,
    seed: int,
    episode_id: str,
    max_new_tokens: int,
    max_completion_tokens: int,
    judge: Any | None = None,
) -> Episode:
    """Run one episode of ``task`` on ``env`` with ``generate`` as the policy.

    Turn by turn: the prompt is the expander's generation prompt for the conversation so far; the
    engine samples at most ``min(max_new_tokens, budget left)`` tokens, where the budget is
    ``max_completion_tokens`` counted from the first generated token (so the record's completion
    fits an engine's fixed response length). The episode ends when the env terminates or truncates
    it, when a turn stops without a stop token (``generation_limit``) or when the budget is spent
    (``max_len``). Unanswered episodes get reward 0 with the reason (trainable); answers the env
    could not score go to ``judge`` (``agentrl.judge.Judge``), whose failures stay ``judge_error``.
    """
    stops = expander.stop_ids
    await asyncio.to_thread(env.reset, seed=seed, options={"task": task})
    first: list[int] | None = None
    reason: str | None = None
    gen_s = env_s = 0.0
    while True:
        prompt = expander.generation_prompt_ids(env.messages)
        if first is None:
            first = prompt
        budget = max_completion_tokens - (len(prompt) - len(first))
        if budget <= 0:
            reason = "max_len"
            break
        t0 = time.perf_counter()
        gen = await generate(prompt, min(max_new_tokens, budget))
        gen_s += time.perf_counter() - t0
        if gen.token_ids and gen.token_ids[-1] in stops:
            gen = replace(gen, finish_reason="stop")
        elif gen.finish_reason == "stop":  # stopped on a stop string the expander does not know
            gen = replace(gen, finish_reason="length")
        msg = sampled_message(expander.tokenizer, gen.token_ids, gen.logprobs, gen.finish_reason, stops)
        t0 = time.perf_counter()
        _, _, terminated, truncated, _ = await asyncio.to_thread(env.step, msg)
        env_s += time.perf_counter() - t0
        if terminated or truncated:
            break
        if gen.finish_reason == "length":
            reason = "generation_limit"
            break
    traj = env.trajectory(id=episode_id, stop_reason=reason)  # unanswered: reward 0, from the env
    traj.info["seed"] = seed
    traj.info["prompt_token_ids"] = first  # TITO for the prompt too: the expander reuses these ids
    await judge_if_needed(traj, judge)
    row = expander.expand(traj)
    record = cut_after_last_policy_token(token_trajectory(row, traj))
    return Episode(trajectory=traj, row=row, record=record, generate_s=gen_s, env_s=env_s)
