"""One episode, engine-neutral: our env, our expander's ids, any engine's token-in-token-out generate.

Every adapter (verl, TRL, SkyRL) runs the one episode loop (``agentrl.rollout.episode``) in token
mode with its engine as the generate function, and only maps the result. Each turn the engine is
fed ``Expander.generation_prompt_ids(env.messages)``: the training row so far plus the generation
prompt, earlier turns exactly as sampled. The sampled ids go back to the env as the assistant
message (text decoded only for the env's parser). The finished trajectory is scored (the env's
deterministic rubric, or our LLM judge when the env could not) and expanded by the same expander,
so the ids, masks, logprobs and scores an adapter hands over are the expander's, never a re-render.

An episode whose context the loop rewrote (``AgentSettings.context``) was sampled from prompts that
are not prefixes of each other: it is expanded into one row per context segment
(``agentrl.tokens.expand_segments``, ids ``ID``, ``ID#1``, ...), each with the episode's reward on
its last policy token, and every adapter hands each row over as a sample of its own.

Each record is cut after its last policy token: what follows it (the template's end-of-turn tail, or
an observation the episode was truncated on) has no loss and nothing conditions on it, and engines
put a scalar reward on their last response token (verl ``rm_scores``) or judge a completion by its
last token (TRL's EOS check); after the cut those are our last policy token.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from agentrl.env import ResearchEnv
from agentrl.env.suite import Task
from agentrl.rollout.context import NO_CONTEXT_POLICY, ContextPolicy
from agentrl.rollout.episode import EpisodeResult, EpisodeSpec, Generation, Limits, Request
from agentrl.rollout.episode import run_episode as run_loop
from agentrl.tokens import (
    Expander,
    TokenizedTrajectory,
    TokenTrajectory,
    expand_segments,
    sampled_segments,
    token_trajectory,
)
from agentrl.trajectory import Trajectory, training_reward
from agentrl.trajectory.context import segment_messages, segments

__all__ = [
    "Episode",
    "GenerateFn",
    "Generation",
    "cut_after_last_policy_token",
    "engine_limits",
    "engine_spec",
    "expand_episode",
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
    after the last policy token), and the seconds spent in the engine and in the env.

    An episode whose context was rewritten has a row and a record per context segment that sampled
    a turn (``rows``, ``records``, in order; ``row`` and ``record`` are then the last segment's, the
    one the episode ended in); otherwise ``rows == [row]`` and ``records == [record]``."""

    trajectory: Trajectory
    row: TokenizedTrajectory
    record: TokenTrajectory
    generate_s: float = 0.0
    env_s: float = 0.0
    rows: list[TokenizedTrajectory] = field(default_factory=list)
    records: list[TokenTrajectory] = field(default_factory=list)
    #: how each row's last sampled turn finished (``stop`` / ``length``; a segment's notes included)
    finishes: list[str | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.rows:
            self.rows = [self.row]
        if not self.records:
            self.records = [self.record]
        if len(self.rows) != len(self.records):
            raise ValueError(
                f"episode {self.trajectory.id}: {len(self.rows)} rows, {len(self.records)} records"
            )

    @property
    def segmented(self) -> bool:
        """Whether the episode is handed over as several samples (its context was rewritten)."""
        return len(self.records) > 1

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
    max_len: int | None = None,
    context: ContextPolicy = NO_CONTEXT_POLICY,
) -> Episode:
    """Run one episode of ``task`` on ``env`` in the episode loop with ``generate`` as the policy.

    Turn by turn: the prompt is the expander's generation prompt for the conversation so far; the
    engine samples at most ``min(max_new_tokens, budget left)`` tokens, where the budget is
    ``max_completion_tokens`` counted from the first generated token (so the record's completion
    fits an engine's fixed response length). The episode ends when the env terminates or truncates
    it, when a turn stops without a stop token (``generation_limit``) or when the budget is spent
    (``max_len``). Unanswered episodes get reward 0 with the reason (trainable); answers the env
    could not score go to ``judge`` (``agentrl.judge.Judge``), whose failures stay ``judge_error``.
    The reward placed and handed over is ``training_reward(trajectory, normalize)``. ``max_len``
    bounds one model call and ``context`` rewrites the context before it (a segmented episode).
    """

    async def turn(req: Request) -> Generation:
        assert req.prompt_ids is not None and req.max_tokens is not None
        return await generate(req.prompt_ids, req.max_tokens)

    spec = engine_spec(task, seed, episode_id)
    limits = engine_limits(max_new_tokens, max_completion_tokens, max_len=max_len, context=context)
    res = await run_loop(env, spec, turn, expander=expander, limits=limits)
    return await to_episode(res, expander, judge, normalize=normalize)


def engine_spec(task: Task | str, seed: int, episode_id: str) -> EpisodeSpec:
    """An adapter's episode: reset seed ``seed``, recorded as ``info["seed"]``."""
    return EpisodeSpec(episode_id, task, seed, {"seed": seed})


def engine_limits(
    max_new_tokens: int,
    max_completion_tokens: int,
    *,
    max_len: int | None = None,
    context: ContextPolicy = NO_CONTEXT_POLICY,
) -> Limits:
    """An adapter's limits: ``max_new_tokens`` a turn, ``max_completion_tokens`` in all (a record's
    completion, each segment's for a rewritten episode), ``max_len`` a model call, and the context
    policy."""
    return Limits(
        max_new_tokens=max_new_tokens,
        max_completion_tokens=max_completion_tokens,
        max_len=max_len,
        context=context,
    )


async def to_episode(
    res: EpisodeResult, expander: Expander, judge: Any | None, *, normalize: bool = True
) -> Episode:
    """The adapters' view of a finished loop episode: the prompt ids recorded (TITO for the prompt
    too: the expander reuses them), scored by ``judge`` when the env could not, expanded (a row per
    context segment, ``expand_segments``) and cut. Every row and record carries the reward
    contract's number (``training_reward`` per ``normalize``), as the native trainer's batch does;
    a segment that sampled nothing (the loop rewrote the context, then stopped) has no sample, as
    in ``build_batch``."""
    traj = res.trajectory
    traj.info["prompt_token_ids"] = res.prompt_ids
    await judge_if_needed(traj, judge)
    return expand_episode(traj, expander, normalize=normalize, generate_s=res.generate_s, env_s=res.env_s)


def expand_episode(
    trajectory: Trajectory,
    expander: Expander,
    *,
    normalize: bool = True,
    generate_s: float = 0.0,
    env_s: float = 0.0,
) -> Episode:
    """The ``Episode`` of a finished (scored) trajectory: its rows, one per context segment that
    sampled a turn (``expand_segments``), and their records cut after the last policy token, all
    with ``training_reward(trajectory, normalize)``."""
    reward = training_reward(trajectory, normalize)
    pairs = sampled_segments(expander, trajectory, reward=reward)
    if not pairs:  # nothing sampled at all: the first segment's row stands for the episode
        pairs = [(segments(trajectory)[0], expand_segments(expander, trajectory, reward=reward)[0])]
    rows = [r for _, r in pairs]
    finishes = []
    for seg, _ in pairs:  # the row's last sampled turn: the segment's last turn, or the notes it wrote
        last = next((m for m in reversed(segment_messages(trajectory, seg)) if m.role == "assistant"), None)
        finishes.append(None if last is None else last.finish_reason)
    records = [cut_after_last_policy_token(token_trajectory(r, trajectory, reward=reward)) for r in rows]
    return Episode(
        trajectory=trajectory,
        row=rows[-1],
        record=records[-1],
        generate_s=generate_s,
        env_s=env_s,
        rows=rows,
        records=records,
        finishes=finishes,
    )
