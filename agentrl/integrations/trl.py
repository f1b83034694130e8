"""TRL: a ``rollout_func`` for ``GRPOTrainer`` that runs our env and expander, and our judge as an
async reward function.

    from agentrl.integrations.trl import make_reward_func, make_rollout_func
    trainer = GRPOTrainer(model=..., reward_funcs=[make_reward_func(settings)],
                          rollout_func=make_rollout_func(settings), train_dataset=...)

The rollout function runs one episode per prompt it is given, all of them turn by turn in lock-step:
each turn, the prompts of the live episodes go to the engine in one batch (by default the trainer's
own token-in-token-out ``_generate_single_turn``: vLLM when ``use_vllm``, else transformers). It
returns prompt ids, completion ids, logprobs and ``env_mask`` (1 on policy tokens) exactly as our
expander lays them out, plus ``agentrl_trajectory`` for the reward function. The reward function
returns the env's rubric score, asks our LLM judge for answers the env could not score, and
returns None for judge errors (TRL then gives that completion no advantage).

TRL's ``rollout_func`` gives one completion per prompt, and its GRPO groups ``num_generations``
consecutive completions, so an episode cannot become several samples: context management
(``AgentSettings.context``, which splits a long episode into context segments) is refused with a
``ConfigError`` that says what to do; long episodes under TRL end at ``max_len`` instead.

Checked against TRL 1.16 (``rollout_func`` and ``env_mask`` are experimental there). This module
imports no TRL: the contract is a plain callable.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agentrl.errors import ConfigError
from agentrl.integrations.episode import Episode, Generation, engine_limits, engine_spec, to_episode
from agentrl.integrations.mapping import trl_rollout_fields
from agentrl.integrations.settings import AgentSettings, expander_for, load_settings
from agentrl.judge.llm import run_sync
from agentrl.rollout.episode import Request, run_episodes
from agentrl.seeds import episode_seed
from agentrl.trajectory import Trajectory, training_reward

__all__ = ["BatchGenerate", "make_reward_func", "make_rollout_func", "trainer_generate_batch"]

# ``generate_batch(prompts [B][P_b], max_tokens [B])`` → B ``Generation``s (may be async).
BatchGenerate = Callable[[list[list[int]], list[int]], Any]


def trainer_generate_batch(trainer: Any) -> BatchGenerate:
    """The trainer's own single-turn token-in-token-out generation as a ``BatchGenerate``: one
    completion per prompt, cut at ``max_tokens`` (the episode loop reads how each finished from
    its last id). Logprobs are None when the trainer's backend gives none (plain transformers)."""

    def generate(prompts: list[list[int]], max_tokens: list[int]) -> list[Generation]:
        completion_ids, logprobs = trainer._generate_single_turn(prompts, None, {}, 1)
        out = []
        for k, ids in enumerate(completion_ids):
            ids = list(ids)[: max_tokens[k]]
            lps = None if logprobs is None else [float(x) for x in logprobs[k]][: len(ids)]
            out.append(Generation(ids, lps))
        return out

    return generate


def _prompt_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    users = [m.get("content", "") for m in prompt if m.get("role") == "user"]
    if not users:
        raise ConfigError(
            "a TRL prompt has no user message; build the dataset with agentrl.integrations.task_data"
        )
    return users[0] if isinstance(users[0], str) else str(users[0])


def make_rollout_func(
    settings: AgentSettings | dict[str, Any] | str | Path | None = None,
    *,
    generate_batch: BatchGenerate | None = None,
    tokenizer: Any = None,
    max_completion_tokens: int = 8192,
    seed: int = 0,
) -> Callable[[list[Any], Any], dict[str, list[Any]]]:
    """A ``rollout_func(prompts, trainer)`` for ``GRPOTrainer``.

    ``prompts``: the conversational prompts TRL hands over (one episode each; TRL's sampler already
    repeats a prompt ``num_generations`` times); each is matched to its task by the user message.
    ``generate_batch`` overrides the engine (default: ``trainer_generate_batch``); ``tokenizer``
    defaults to ``trainer.processing_class``. ``max_completion_tokens`` caps one episode's
    completion. Prompt ``k`` of the ``call``-th call (0-based, counted per process) resets its env
    with ``agentrl.seeds.episode_seed(seed, task, k, step=call)``. Returns
    ``mapping.trl_rollout_fields`` of the episodes, in prompt order.
    """
    cfg = load_settings(settings, source="TRL rollout settings")
    if cfg.rewrites_context:
        raise ConfigError(
            f"TRL rollout settings: context.strategy={cfg.context.strategy} splits a long episode into "
            "context segments, one training sample each, but TRL's rollout_func takes one completion "
            "per prompt: use context.strategy=none with TRL (a long episode then ends at max_len), or "
            "train long episodes with agentrl's trainer, verl or SkyRL step-wise (docs/integrations.md)"
        )
    env0 = cfg.make_env()
    by_prompt: dict[str, str] = {}
    for t in env0.tasks:
        by_prompt.setdefault(t.prompt, t.id)
    calls = {"n": 0}

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        tok = tokenizer if tokenizer is not None else getattr(trainer, "processing_class", None)
        tok = getattr(tok, "tokenizer", tok)  # a processor wraps its tokenizer
        if tok is None:
            raise ConfigError("make_rollout_func: no tokenizer (pass tokenizer= or use it from a trainer)")
        exp = expander_for(tok, **cfg.template_kwargs)
        engine = generate_batch or trainer_generate_batch(trainer)
        task_ids = []
        for p in prompts:
            text = _prompt_text(p)
            if text not in by_prompt:
                raise ConfigError(f"no task of suite {env0.suite.root} has the prompt {text[:80]!r}")
            task_ids.append(by_prompt[text])
        call = calls["n"]
        calls["n"] += 1
        episodes = run_sync(_rollout(cfg, exp, engine, task_ids, seed, call, max_completion_tokens))
        return trl_rollout_fields(episodes)

    return rollout_func


async def _rollout(
    cfg: AgentSettings,
    exp: Any,
    engine: BatchGenerate,
    task_ids: Sequence[str],
    seed: int,
    call: int,
    max_completion_tokens: int,
) -> list[Episode]:
    specs = [
        engine_spec(t, episode_seed(seed, t, k, step=call), f"{t}#{call}.{k}") for k, t in enumerate(task_ids)
    ]

    def generate_batch(reqs: list[Request]) -> Any:
        return engine([r.prompt_ids or [] for r in reqs], [int(r.max_tokens or 0) for r in reqs])

    # Lock-step: each turn the live episodes' prompts go to the engine in one batch, in prompt order.
    results = await run_episodes(
        [cfg.make_env() for _ in specs], specs, generate_batch=generate_batch, expander=exp,
        limits=engine_limits(cfg.max_new_tokens, max_completion_tokens, max_len=cfg.max_len),
    )  # fmt: skip
    # the LLM judge runs in the reward function
    return [await to_episode(r, exp, None, normalize=cfg.normalize) for r in results]


def make_reward_func(
    settings: AgentSettings | dict[str, Any] | str | Path | None = None,
) -> Callable[..., Any]:
    """An async TRL reward function named ``agentrl_reward``: for each completion, the env's rubric
    score, or our LLM judge's (``settings.judge``) when the env could not score the answer, as
    ``training_reward`` per ``settings.normalize`` (the native trainer's number); None for a judge
    error or an answer no judge was configured for (TRL excludes it from the baseline)."""
    cfg = load_settings(settings, source="TRL reward settings")
    judge = cfg.make_judge()

    async def agentrl_reward(
        prompts: list[Any], completions: list[Any], agentrl_trajectory: list[str], **kwargs: Any
    ) -> list[float | None]:
        from agentrl.integrations.episode import judge_if_needed

        trajs = [Trajectory.model_validate_json(s) for s in agentrl_trajectory]
        await asyncio.gather(*(judge_if_needed(t, judge) for t in trajs))
        return [training_reward(t, cfg.normalize) for t in trajs]

    return agentrl_reward
