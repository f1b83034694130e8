"""SkyRL: our env as a skyrl-gym env, and a generator that keeps our token layout and per-token scores.

- ``ResearchTextEnv`` (a skyrl-gym ``BaseTextEnv``; ``register_env()`` registers it as
  ``agentrl-deep-research``): text in, tool messages out, for SkyRL's stock generator. The episode
  reward is our rubric score (with ``judge: inline`` in the env config, our LLM judge scores answers
  that need it). A judge failure is never a number: reward NaN with ``metadata["reward_status"] =
  "judge_error"`` (``"unscored"`` for an answer no judge was configured for).
- ``ResearchGenerator``: SkyRL's generator contract (``async generate(GeneratorInput) ->
  GeneratorOutput``) run by our episode loop: each turn is fed the expander's generation prompt
  through the inference client's ``generate(prompt_token_ids=...)`` (token in, token out), and the
  output carries our masks, logprobs and per-token rewards (``token_level_scores``), so nothing is
  re-tokenized from chat history. A group with a judge failure is dropped whole and counted
  (``mapping.skyrl_generator_output``): SkyRL keeps every sample, so that is how it stays out of
  a baseline. Use it from a ``BasePPOExp.get_generator`` override
  (``examples/skyrl/main_agentrl.py``). With context management (``AgentSettings.context``) an
  episode may be split into context segments: build it with ``step_wise=True`` under SkyRL's
  ``generator.step_wise_trajectories=true``, and each segment is a step of its trajectory.

skyrl-gym (``agentrl[skyrl]``) is imported here; skyrl-train is not needed to build either class
(the generator is registered as a virtual subclass of its ``GeneratorInterface`` when installed).
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any
from uuid import uuid4

try:
    import skyrl_gym
    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("agentrl.integrations.skyrl needs skyrl-gym (pip install 'agentrl[skyrl]')") from e

from agentrl.errors import ConfigError
from agentrl.integrations.episode import Episode, Generation, run_episode
from agentrl.integrations.mapping import skyrl_generator_output
from agentrl.integrations.settings import AgentSettings, expander_for, load_settings
from agentrl.trajectory import RewardBreakdown, training_reward

__all__ = ["ENV_ID", "ResearchGenerator", "ResearchTextEnv", "register_env"]

ENV_ID = "agentrl-deep-research"


def _task_id(extras: dict[str, Any] | None) -> str | None:
    extras = extras or {}
    found = extras.get("task_id") or (extras.get("extra_info") or {}).get("task_id")
    return None if found is None else str(found)


class ResearchTextEnv(BaseTextEnv):
    """Our ``ResearchEnv`` behind skyrl-gym's text API.

    ``env_config``: ``AgentSettings`` (a mapping with ``env``, ...; an OmegaConf node works);
    ``extras``: the dataset row's fields, with ``task_id`` (and optionally ``seed``).
    ``step(action)`` returns the tool results as ``role: tool`` messages.
    """

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.settings = load_settings(env_config, source="skyrl env_config")
        self.task_id = _task_id(extras)
        if self.task_id is None:
            raise ConfigError(
                "skyrl env_extras has no task_id; build the dataset with agentrl.integrations.task_data"
            )
        self.seed = int((extras or {}).get("seed", 0))
        self.env = self.settings.make_env()
        self.max_turns = self.env.config.budgets.max_turns

    def init(self, prompt: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Start the episode; the prompt is the env's own (system prompt with the task's date, task)."""
        self.env.reset(seed=self.seed, options={"task": self.task_id})
        return [{"role": m.role, "content": m.text} for m in self.env.messages], {"task_id": self.task_id}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """One assistant turn (text) → tool messages, reward (the rubric score when it answers), done."""
        self.turns += 1
        _, reward, terminated, truncated, info = self.env.step(action)
        observations = [
            {"role": "tool", "content": m.get("content") or "", "tool_call_id": m.get("tool_call_id") or ""}
            for m in info["messages"]
        ]
        done = bool(terminated or truncated)
        metadata = {
            k: info[k] for k in ("turn", "tool_calls", "format_errors", "truncated_reason") if k in info
        }
        status = _reward_status(info) if terminated else "ok"
        if status != "ok":
            # Never a number: the judge failed (or no judge was configured for LLM criteria).
            reward = math.nan
        elif terminated and info.get("reward_breakdown"):
            # the reward contract's number, as the native trainer's (normalised per the settings)
            scored = training_reward(
                RewardBreakdown.model_validate(info["reward_breakdown"]), self.settings.normalize
            )
            reward = math.nan if scored is None else scored
        metadata["reward_status"] = status
        return BaseTextEnvStepOutput(
            observations=observations, reward=float(reward), done=done, metadata=metadata
        )

    def get_metrics(self) -> dict[str, Any]:
        """Env counters of the episode (tool calls, format errors, ...)."""
        return dict(getattr(self.env, "counts", {}))


def _reward_status(info: dict[str, Any]) -> str:
    """``ok``, ``judge_error`` (the judge failed after its retries) or ``unscored`` (an answer the
    env left to an LLM judge that this env was not given) for a terminating step's ``info``."""
    status = info.get("reward_status")
    breakdown = info.get("reward_breakdown") or {}
    if status == "judge_error" or breakdown.get("status") == "judge_error":
        return "judge_error"
    if info.get("needs_judge"):
        return "unscored"
    return "ok"


def register_env(env_id: str = ENV_ID) -> str:
    """Register ``ResearchTextEnv`` with skyrl-gym under ``env_id`` (once per process)."""
    if env_id not in skyrl_gym.registry:
        skyrl_gym.register(id=env_id, entry_point=f"{__name__}:ResearchTextEnv")
    return env_id


class ResearchGenerator:
    """SkyRL generator: our episode loop with SkyRL's inference client as the engine.

    ``inference_engine_client``: anything with SkyRL's ``async generate(InferenceEngineInput)``;
    ``tokenizer``: the policy's; ``settings``: ``AgentSettings``; ``max_completion_tokens`` caps one
    episode's response (SkyRL's ``max_generate_length``-style budget); ``sampling_params`` are used
    when the batch brings none; ``model`` is passed to ``generate`` when set (newer clients);
    ``step_wise`` (SkyRL's ``generator.step_wise_trajectories``) hands each episode over as its
    context segments, with ``is_last_step`` (``mapping.skyrl_generator_output``). Context
    management without ``step_wise`` is refused here, before any episode runs.
    """

    def __init__(
        self,
        inference_engine_client: Any,
        tokenizer: Any,
        settings: AgentSettings | dict[str, Any] | str | Path | None = None,
        *,
        max_completion_tokens: int = 8192,
        sampling_params: dict[str, Any] | None = None,
        model: str | None = None,
        step_wise: bool = False,
    ) -> None:
        self.client = inference_engine_client
        self.settings = load_settings(settings, source="skyrl generator settings")
        self.step_wise = step_wise
        if self.settings.rewrites_context and not step_wise:
            raise ConfigError(
                f"context.strategy={self.settings.context.strategy} splits an episode into context "
                "segments, which SkyRL trains as steps: set generator.step_wise_trajectories=true and "
                "build ResearchGenerator(..., step_wise=True), or use context.strategy=none"
            )
        self.expander = expander_for(tokenizer, **self.settings.template_kwargs)
        self.judge = self.settings.make_judge()
        self.max_completion_tokens = max_completion_tokens
        self.sampling_params = dict(sampling_params or {})
        self.model = model
        self.episodes: list[Episode] = []  # the last batch, for inspection

    async def generate(self, input_batch: dict[str, Any]) -> dict[str, Any]:
        """``GeneratorInput`` → ``GeneratorOutput`` (see ``mapping.skyrl_generator_output``)."""
        prompts = input_batch["prompts"]
        extras = input_batch.get("env_extras") or [{} for _ in prompts]
        traj_ids = input_batch.get("trajectory_ids")
        sampling = dict(input_batch.get("sampling_params") or self.sampling_params)

        async def one(k: int) -> Episode:
            task_id = _task_id(extras[k])
            if task_id is None:
                raise ConfigError(f"skyrl env_extras[{k}] has no task_id")
            tid = traj_ids[k] if traj_ids is not None else None
            session = tid.to_string() if hasattr(tid, "to_string") else uuid4().hex

            async def generate(prompt_ids: list[int], max_tokens: int) -> Generation:
                request = {
                    "prompts": None,
                    "prompt_token_ids": [prompt_ids],
                    "sampling_params": {**sampling, "max_tokens": max_tokens},
                    "session_ids": [session],
                }
                out = await (
                    self.client.generate(request, model=self.model)
                    if self.model
                    else self.client.generate(request)
                )
                ids = list(out["response_ids"][0])
                lps = out.get("response_logprobs")
                return Generation(ids, None if lps is None else list(lps[0]))

            return await run_episode(
                self.settings.make_env(),
                self.expander,
                generate,
                task=task_id,
                # Samples of one prompt (SkyRL repeats the row) get seeds of their own.
                seed=int(extras[k].get("seed", k)) * 1000 + int(getattr(tid, "repetition_id", 0) or 0),
                episode_id=f"{task_id}#{session}",
                max_new_tokens=self.settings.max_new_tokens,
                max_completion_tokens=self.max_completion_tokens,
                judge=self.judge,
                normalize=self.settings.normalize,
                max_len=self.settings.max_len,
                context=self.settings.context_policy(),
            )

        self.episodes = list(await asyncio.gather(*(one(k) for k in range(len(prompts)))))
        return skyrl_generator_output(self.episodes, traj_ids, step_wise=self.step_wise)


def _register_virtual_subclass() -> None:
    for module in ("skyrl.train.generators.base", "skyrl_train.generators.base"):
        try:
            base = __import__(module, fromlist=["GeneratorInterface"]).GeneratorInterface
        except Exception:
            continue
        base.register(ResearchGenerator)
        return


_register_virtual_subclass()
