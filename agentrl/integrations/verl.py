"""verl: ``ResearchAgentLoop``, an agent loop that runs our env, expander and judge inside verl.

Registered as ``agentrl_research``. verl builds one loop per sample with
``hydra.utils.instantiate(<agent loop config>, trainer_config=..., server_manager=..., tokenizer=...)``;
the ``agentrl:`` block of that config (see ``examples/verl/agent_loop.yaml``) becomes our
``AgentSettings``. ``run`` reads the task from the dataset row (``extra_info.task_id``, written by
``python -m agentrl.integrations.task_data --engine verl``), samples every turn with
``server_manager.generate(prompt_ids=...)`` (token in, token out) and returns an ``AgentLoopOutput``
whose ids, mask, logprobs and reward are our expander's (``mapping.verl_output_fields``).
A trajectory the judge failed on is handed over with an all-zero mask; the advantage estimator
``agentrl_grpo`` (``verl_advantage``, required in place of verl's group estimators) keeps it out of
its group's baseline.

An episode whose context was rewritten (``agentrl.context``) is returned as a list of outputs, one
per context segment (``mapping.verl_outputs``): verl's v1 agent-loop worker (``trainer.use_v1``,
verl's default since 0.7) stores them as ``{uid}_{session}_{k}``, and ``agentrl_grpo`` scores the
session (our episode) once and gives each segment its advantage. verl's legacy worker takes one
output per sample, so the loop refuses context management there.

Needs verl >= 0.6 (``TokenOutput`` with ``log_probs``, ``AgentLoopOutput.reward_score``); checked
against verl 0.9.1's classes. Import this module only where verl is installed.
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

try:
    from verl.experimental.agent_loop.agent_loop import (
        AgentLoopBase,
        AgentLoopMetrics,
        AgentLoopOutput,
        register,
    )
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "agentrl.integrations.verl needs verl>=0.6 with its agent loop (pip install 'agentrl[verl]')"
    ) from e

from agentrl.errors import ConfigError
from agentrl.integrations.episode import Episode, Generation, run_episode
from agentrl.integrations.mapping import verl_outputs
from agentrl.integrations.settings import expander_for, load_settings
from agentrl.integrations.verl_advantage import check_estimator

__all__ = ["AGENT_NAME", "ResearchAgentLoop"]

AGENT_NAME = "agentrl_research"


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(key, default)
    getter = getattr(obj, "get", None)  # OmegaConf nodes and numpy-object rows from verl's batch
    return getter(key, default) if callable(getter) else getattr(obj, key, default)


@register(AGENT_NAME)
class ResearchAgentLoop(AgentLoopBase):
    """One deep-research episode per dataset row, token-in-token-out through verl's server manager.

    ``agentrl`` (keyword, from the agent-loop YAML): ``AgentSettings`` (env, judge,
    max_new_tokens, template_kwargs). Everything else goes to verl's ``AgentLoopBase``.
    """

    def __init__(self, *args: Any, agentrl: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        why = check_estimator(_get(_get(self.config, "algorithm"), "adv_estimator"))
        if why is not None:
            raise ConfigError(why)
        self.settings = load_settings(agentrl, source="verl agent loop config: agentrl")
        if self.settings.rewrites_context and not _get(_get(self.config, "trainer"), "use_v1", True):
            raise ConfigError(
                f"agentrl.context.strategy={self.settings.context.strategy} hands verl several samples "
                "per episode (one per context segment), which only verl's v1 trainer takes: set "
                "trainer.use_v1=true, or agentrl.context.strategy=none"
            )
        self.expander = expander_for(self.tokenizer, **self.settings.template_kwargs)
        self.judge = self.settings.make_judge()
        self.episode: Episode | None = None  # the last finished episode (verl builds a loop per sample)

    async def run(
        self, sampling_params: dict[str, Any], **kwargs: Any
    ) -> AgentLoopOutput | list[AgentLoopOutput]:
        """Run one episode; ``kwargs`` are the dataset row's fields (``extra_info`` holds ``task_id``
        and optionally ``seed``; ``index`` seeds the env otherwise). One output, or one per context
        segment (in order) for an episode whose context was rewritten."""
        extra = kwargs.get("extra_info") or {}
        task_id = _get(extra, "task_id") or kwargs.get("task_id")
        if not task_id:
            raise ConfigError(
                "verl dataset row has no extra_info.task_id; build the dataset with "
                "python -m agentrl.integrations.task_data --engine verl"
            )
        seed = int(_get(extra, "seed", _get(extra, "index", kwargs.get("index", 0))) or 0)
        rollout = self.config.actor_rollout_ref.rollout
        request_id = uuid4().hex  # one sticky session per episode: the server reuses its prefix cache

        async def generate(prompt_ids: list[int], max_tokens: int) -> Generation:
            out = await self.server_manager.generate(
                request_id=request_id,
                prompt_ids=prompt_ids,
                sampling_params={**sampling_params, "max_tokens": max_tokens},
            )
            ids = list(out.token_ids)
            return Generation(ids, None if out.log_probs is None else list(out.log_probs))

        env = self.settings.make_env()
        try:
            ep = await run_episode(
                env,
                self.expander,
                generate,
                task=str(task_id),
                seed=seed,
                episode_id=f"{task_id}#{request_id[:8]}",
                max_new_tokens=self.settings.max_new_tokens,
                max_completion_tokens=int(rollout.response_length),
                judge=self.judge,
                normalize=self.settings.normalize,
                max_len=self.settings.max_len,
                context=self.settings.context_policy(),
            )
        finally:
            env.close()
        self.episode = ep
        outputs = [
            AgentLoopOutput(
                metrics=AgentLoopMetrics(generate_sequences=ep.generate_s, tool_calls=ep.env_s), **fields
            )
            for fields in verl_outputs(ep)
        ]
        return outputs if ep.segmented else outputs[0]
