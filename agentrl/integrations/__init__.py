"""Adapters that run our env, expander and judge inside other RL engines (layer 5).

Engine-neutral, imported here: ``run_episode`` (one episode with any engine's token-in-token-out
``generate``), ``Episode``/``Generation``, ``AgentSettings`` and the field maps of ``mapping``.
Engine-specific, imported only on demand (each an optional extra):

- ``agentrl.integrations.verl``: ``ResearchAgentLoop``, a verl ``AgentLoopBase`` (``agentrl[verl]``);
- ``agentrl.integrations.trl``: ``make_rollout_func`` and ``make_reward_func`` for TRL's
  ``GRPOTrainer`` (``agentrl[trl]``);
- ``agentrl.integrations.skyrl``: ``ResearchTextEnv`` (a skyrl-gym env), ``register_env`` and
  ``ResearchGenerator`` (``agentrl[skyrl]``).

See ``docs/integrations.md``. Importing this package imports no engine.
"""

from agentrl.integrations.episode import (
    Episode,
    GenerateFn,
    Generation,
    cut_after_last_policy_token,
    judge_if_needed,
    run_episode,
)
from agentrl.integrations.mapping import (
    SegmentedEpisodeError,
    skyrl_generator_output,
    trl_rollout_fields,
    verl_output_fields,
    verl_outputs,
)
from agentrl.integrations.settings import AgentSettings, expander_for, load_settings

__all__ = [
    "AgentSettings",
    "Episode",
    "GenerateFn",
    "Generation",
    "SegmentedEpisodeError",
    "cut_after_last_policy_token",
    "expander_for",
    "judge_if_needed",
    "load_settings",
    "run_episode",
    "skyrl_generator_output",
    "trl_rollout_fields",
    "verl_output_fields",
    "verl_outputs",
]
