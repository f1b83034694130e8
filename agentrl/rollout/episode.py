"""The one episode loop: reset the env, ask a *generate function* for each turn, step, finish.

Every engine is a generate function plugged into ``run_episode`` / ``run_episodes``: chat policies
(oracle, OpenAI-compatible, litellm; ``policy_generate``), the trainer's HF sampler (lock-step
batched, ``generate_batch``), vLLM, replay playback and the verl/TRL/SkyRL adapters. A generate
function gets a ``Request`` and returns one of

- a ``Message`` (chat mode): handed to the env as the assistant turn, as a chat policy wrote it
  (the prompt ids a server reported for the first turn, ``PROMPT_IDS``, go to
  ``trajectory.info["prompt_token_ids"]``; later turns' are dropped);
- a ``Generation`` (token mode, any object with ``token_ids`` and ``logprobs``; an engine's own
  ``finish_reason`` is not read: ``turn_finish`` decides from the last id):
  token-in-token-out, the request's ``prompt_ids`` are ``expander.generation_prompt_ids(messages)``
  (exactly the training row so far plus the generation prompt) and the sampled ids become the
  assistant message through ``sampled_message``;
- a ``Stop(reason)``: the policy has no further turn (replay playback ran out of stored turns; a
  chat policy's server said the conversation outgrew its context: ``context_length_exceeded``,
  with the server's words in ``info["truncated_detail"]``).

The loop owns, once for every engine:

- **seeds**: every seed of a run comes from the one hash ``agentrl.seeds.stable_seed``; an
  episode resets its env with ``spec.seed`` (``agentrl.seeds.episode_seed`` where agentrl draws it) and turn ``t`` samples with ``turn_seed(spec.seed, t)``,
  so a turn's tokens depend on its own (seed, turn), never on batch composition or timing;
- **limits** (token mode only; chat policies bound their own replies): with ``limits.max_len`` the
  episode stops as ``max_len`` before a turn whose ``len(prompt) + max_new_tokens`` exceeds it (the
  trainer's context length); with ``limits.max_completion_tokens`` a turn may sample at most what
  is left of that budget counted from the first generated token (of the context segment: a
  rewritten context starts a new row, and so a new response), and stops as ``max_len`` when
  nothing is left (an engine's fixed response length);
- **stops**: a token turn ends with a stop token (``finish_reason`` ``stop``, whatever the engine
  said) or it was cut (``length``); a cut turn the env did not end stops the episode as
  ``generation_limit``. Chat turns cut by their ``max_tokens`` are passed on like any other (the
  env never takes a cut turn as a report);
- **the end**: ``env.trajectory(id, stop_reason=...)``; the env owns the outcome (the report, the
  unanswered rule and its reward). ``spec.info`` is added to ``trajectory.info`` in its order;
- **timing**: the seconds spent in the generate function and in the env, on ``EpisodeResult``
  (never on the trajectory, whose file stays independent of the machine's speed).

``run_episodes`` runs many episodes concurrently, env resets and steps in ``executor`` threads.
With ``generate_batch`` the episodes run in lock-step: every live episode's request of a turn is
gathered (in ``specs`` order) into one call, as one batched forward pass of the HF sampler.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import inspect
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from agentrl.policy.base import Policy
from agentrl.policy.server_reply import CONTEXT_OVERFLOW, PROMPT_IDS, ContextOverflow
from agentrl.rollout.rewrite import rewrite_context
from agentrl.rollout.turns import (
    NO_LIMITS,
    BatchGenerateFn,
    EpisodeSpec,
    GenerateFn,
    Generation,
    Limits,
    Request,
    Sampled,
    Stop,
    turn_finish,
    turn_seed,
)
from agentrl.seeds import episode_seed, stable_seed
from agentrl.stopping import stop_point
from agentrl.tokens import Expander, sampled_message
from agentrl.trajectory import Message, Trajectory
from agentrl.trajectory.context import CONTEXT_SEGMENTS, ContextView

__all__ = [
    "BatchGenerateFn",
    "EpisodeResult",
    "EpisodeSpec",
    "GenerateFn",
    "Generation",
    "Limits",
    "Request",
    "Stop",
    "episode_seed",
    "policy_generate",
    "run_episode",
    "run_episodes",
    "stable_seed",
    "trim",
    "turn_finish",
    "turn_seed",
]


@dataclass
class EpisodeResult:
    """A finished episode: its ``trajectory``, the first turn's ``prompt_ids`` (token mode), the
    number of generate calls (``turns``), the loop's ``stop_reason`` (None when the env ended it),
    and the seconds spent generating, in the env, and in all."""

    trajectory: Trajectory
    prompt_ids: list[int] | None = None
    turns: int = 0
    stop_reason: str | None = None
    generate_s: float = 0.0
    env_s: float = 0.0
    wall_s: float = 0.0


def policy_generate(policy: Policy) -> GenerateFn:
    """A chat ``Policy`` (oracle, openai, litellm) as a generate function; a ``ContextOverflow``
    ends the episode as ``Stop(CONTEXT_OVERFLOW)``, so its trajectory is written (truncated) and a
    resumed run does not send it again."""

    async def generate(req: Request) -> Message | Stop:
        try:
            return await policy.act(list(req.messages), req.context())
        except ContextOverflow as e:
            return Stop(CONTEXT_OVERFLOW, str(e))

    return generate


async def _in(executor: cf.Executor | None, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(executor, lambda: fn(*args, **kwargs))


async def run_episode(
    env: Any,
    spec: EpisodeSpec,
    generate: GenerateFn,
    *,
    expander: Expander | None = None,
    stop_ids: Collection[int] | None = None,
    limits: Limits = NO_LIMITS,
    executor: cf.Executor | None = None,
    index: int = 0,
) -> EpisodeResult:
    """Run one episode of ``spec`` on ``env`` with ``generate`` as the policy (module docstring).

    ``expander`` turns on token mode (requests carry ``prompt_ids``); ``stop_ids`` default to the
    expander's. Env calls run in ``executor`` (None: asyncio's default threads).
    """
    t_start = time.perf_counter()
    await _in(executor, env.reset, seed=spec.seed, options={"task": spec.task})
    stops = set(expander.stop_ids if stop_ids is None and expander is not None else stop_ids or ())
    first: list[int] | None = None
    base = 0  # the length of the context segment's first prompt (max_completion_tokens counts from it)
    reason: str | None = None
    detail: str | None = None
    chat_prompt: list[int] | None = None  # the first prompt as a chat server tokenized it
    turn = 0
    gen_s = env_s = 0.0
    trigger = limits.context.trigger(limits.max_len, limits.max_new_tokens)
    ctx = ContextView()  # how the model sees env.messages (context management)
    rewrites: list[dict[str, Any]] = []
    while True:
        stop_point()  # Ctrl-C, SIGTERM: between turns (agentrl.stopping)
        prompt: list[int] | None = None
        max_tokens = limits.max_new_tokens
        seen = ctx.show(env.messages)
        if expander is not None:
            prompt = expander.generation_prompt_ids(seen)
            if trigger is not None and turn > 0 and len(prompt) + (max_tokens or 0) > trigger:
                t0 = time.perf_counter()
                rewritten = await rewrite_context(
                    ctx, env, spec, generate, expander, stops, limits, turn, index, rewrites, base
                )
                gen_s += time.perf_counter() - t0
                if isinstance(rewritten, Stop):
                    reason, detail = rewritten.reason, rewritten.detail
                    break
                if rewritten != ctx:  # a new context segment begins with this turn
                    ctx = rewritten
                    seen = ctx.show(env.messages)
                    prompt = expander.generation_prompt_ids(seen)
                    base = len(prompt)
            if first is None:
                first, base = prompt, len(prompt)
            if limits.max_len is not None and len(prompt) + (max_tokens or 0) > limits.max_len:
                reason = "max_len"
                break
            if limits.max_completion_tokens is not None:
                budget = limits.max_completion_tokens - (len(prompt) - base)
                if budget <= 0:
                    reason = "max_len"
                    break
                max_tokens = budget if max_tokens is None else min(max_tokens, budget)
        seed = None if spec.seed is None else turn_seed(spec.seed, turn)
        req = Request(env, spec, index, turn, seed, list(seen), prompt, max_tokens)
        t0 = time.perf_counter()
        out = await generate(req)
        gen_s += time.perf_counter() - t0
        turn += 1
        if isinstance(out, Stop):
            reason, detail = out.reason, out.detail
            break
        cut = False
        if isinstance(out, Message) and out.model_extra and PROMPT_IDS in out.model_extra:
            fed = out.model_extra.pop(PROMPT_IDS)
            chat_prompt = fed if turn == 1 else chat_prompt
        if not isinstance(out, Message):
            if expander is None:
                raise ValueError("a generate function returned token ids, but run_episode got no expander")
            ids = [int(t) for t in out.token_ids]
            finish = turn_finish(ids, stops)  # no stop token: the turn was cut
            cut = finish == "length"
            out = sampled_message(expander.tokenizer, ids, out.logprobs, finish, stops)
        t0 = time.perf_counter()
        _, _, terminated, truncated, _ = await _in(executor, env.step, out)
        env_s += time.perf_counter() - t0
        if terminated or truncated:
            break
        if cut:
            reason = "generation_limit"
            break
    traj = env.trajectory(id=spec.id, stop_reason=reason)  # the env decides answered / unanswered
    if detail is not None:
        traj.info["truncated_detail"] = detail
    if chat_prompt is not None:
        traj.info["prompt_token_ids"] = chat_prompt  # the expander uses it as the first prompt
    if rewrites:
        traj.info[CONTEXT_SEGMENTS] = rewrites  # the expander gives one row per segment
    traj.info.update(spec.info)
    wall = time.perf_counter() - t_start
    return EpisodeResult(traj, first, turn, reason, gen_s, env_s, wall)


class _Lockstep:
    """Gathers one request from every live episode, then makes one ``generate_batch`` call (the
    requests in episode order), so the episodes advance turn by turn together."""

    def __init__(self, generate_batch: BatchGenerateFn, live: int) -> None:
        self.generate_batch = generate_batch
        self.live = live
        self.pending: list[tuple[Request, asyncio.Future[Any]]] = []
        self.calls = 0

    async def generate(self, req: Request) -> Any:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending.append((req, fut))
        if len(self.pending) >= self.live:
            await self._flush()
        return await fut

    async def done(self) -> None:
        self.live -= 1
        if self.pending and len(self.pending) >= self.live:
            await self._flush()

    async def _flush(self) -> None:
        batch = sorted(self.pending, key=lambda p: p[0].index)
        self.pending = []
        self.calls += 1
        try:
            outs = self.generate_batch([r for r, _ in batch])
            if inspect.isawaitable(outs):
                outs = await outs
            if len(outs) != len(batch):
                raise RuntimeError(f"the engine returned {len(outs)} generations for {len(batch)} prompts")
        except BaseException as e:
            for _, fut in batch:
                fut.set_exception(e)
            return
        for (_, fut), gen in zip(batch, outs, strict=True):
            fut.set_result(gen)


async def run_episodes(
    envs: Sequence[Any],
    specs: Sequence[EpisodeSpec],
    *,
    generate: GenerateFn | None = None,
    generate_batch: BatchGenerateFn | None = None,
    expander: Expander | None = None,
    stop_ids: Collection[int] | None = None,
    limits: Limits = NO_LIMITS,
    executor: cf.Executor | None = None,
) -> list[EpisodeResult]:
    """Run ``specs`` concurrently, episode ``i`` on ``envs[i]``; one result per spec, in order.

    Give exactly one of ``generate`` (one request at a time, concurrently) or ``generate_batch``
    (lock-step: a list of requests, one per live episode, in ``specs`` order; sync or async).
    """
    if (generate is None) == (generate_batch is None):
        raise ValueError("give exactly one of generate and generate_batch")
    if len(envs) < len(specs):
        raise ValueError(f"{len(specs)} episodes need {len(specs)} envs, got {len(envs)}")
    batcher = _Lockstep(generate_batch, len(specs)) if generate_batch is not None else None
    gen = batcher.generate if batcher is not None else generate
    assert gen is not None

    async def one(i: int) -> EpisodeResult:
        try:
            return await run_episode(
                envs[i], specs[i], gen, expander=expander, stop_ids=stop_ids, limits=limits,
                executor=executor, index=i,
            )  # fmt: skip
        finally:
            if batcher is not None:
                await batcher.done()

    return list(await asyncio.gather(*(one(i) for i in range(len(specs)))))


def trim(gen: Sampled, max_tokens: int | None) -> Generation:
    """``gen`` cut to ``max_tokens`` (a batched engine sampled up to the batch's largest limit)."""
    ids, lps = list(gen.token_ids), gen.logprobs
    if max_tokens is None or len(ids) <= max_tokens:
        return Generation(ids, None if lps is None else list(lps))
    return Generation(ids[:max_tokens], None if lps is None else list(lps)[:max_tokens])
