"""One episode, engine-neutral: our env, our expander's ids, any engine's token-in-token-out generate.

Every adapter (verl, TRL, SkyRL) runs the one episode loop (``agentrl.rollout.episode``) in token
mode with its engine as the generate function, and only maps the result. Each turn the engine is
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

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from agentrl.env import ResearchEnv
from agentrl.env.suite import Task
from agentrl.rollout.episode import EpisodeResult, EpisodeSpec, Generation, Limits, Request
from agentrl.rollout.episode import run_episode as run_loop
from agentrl.tokens import Expander, TokenizedTrajectory, TokenTrajectory, token_trajectory
from agentrl.trajectory import Trajectory, training_reward

__all__ = [
    "Episode",
    "GenerateFn",
    "Generation",
    "cut_after_last_policy_token",
    "engine_limits",
    "engine_spec",
    "judge_if_needed",
    "run_episode",
    "to_episode",
]


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
    normalize: bool = True,
) -> Episode:
    """Run one episode of ``task`` on ``env`` in the episode loop with ``generate`` as the policy.

    Turn by turn: the prompt is the expander's generation prompt for the conversation so far; the
    engine samples at most ``min(max_new_tokens, budget left)`` tokens, where the budget is
    ``max_completion_tokens`` counted from the first generated token (so the record's completion
    fits an engine's fixed response length). The episode ends when the env terminates or truncates
    it, when a turn stops without a stop token (``generation_limit``) or when the budget is spent
    (``max_len``). Unanswered episodes get reward 0 with the reason (trainable); answers the env
    could not score go to ``judge`` (``agentrl.judge.Judge``), whose failures stay ``judge_error``.
    The reward placed and handed over is ``training_reward(trajectory, normalize)``.
    """

    async def turn(req: Request) -> Generation:
        assert req.prompt_ids is not None and req.max_tokens is not None
        return await generate(req.prompt_ids, req.max_tokens)

    spec = engine_spec(task, seed, episode_id)
    res = await run_loop(
        env, spec, turn, expander=expander, limits=engine_limits(max_new_tokens, max_completion_tokens)
    )
    return await to_episode(res, expander, judge, normalize=normalize)


def engine_spec(task: Task | str, seed: int, episode_id: str) -> EpisodeSpec:
    """An adapter's episode: reset seed ``seed``, recorded as ``info["seed"]``."""
    return EpisodeSpec(episode_id, task, seed, {"seed": seed})


def engine_limits(max_new_tokens: int, max_completion_tokens: int) -> Limits:
    """An adapter's limits: ``max_new_tokens`` a turn, ``max_completion_tokens`` in all."""
    return Limits(max_new_tokens=max_new_tokens, max_completion_tokens=max_completion_tokens)


async def to_episode(
    res: EpisodeResult, expander: Expander, judge: Any | None, *, normalize: bool = True
) -> Episode:
    """The adapters' view of a finished loop episode: the prompt ids recorded (TITO for the prompt
    too: the expander reuses them), scored by ``judge`` when the env could not, expanded and cut.
    The row and the record carry the reward contract's number (``training_reward`` per
    ``normalize``), as the native trainer's batch does."""
    traj = res.trajectory
    traj.info["prompt_token_ids"] = res.prompt_ids
    await judge_if_needed(traj, judge)
    reward = training_reward(traj, normalize)
    row = expander.expand(traj, reward=reward)
    record = cut_after_last_policy_token(token_trajectory(row, traj, reward=reward))
    return Episode(trajectory=traj, row=row, record=record, generate_s=res.generate_s, env_s=res.env_s)
