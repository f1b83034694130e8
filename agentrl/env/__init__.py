"""The deep-research environment (layer 2): ``ResearchEnv``, its config, suites and tool backends.

Importing this package registers ``agentrl/DeepResearch-v0`` with gymnasium::

    import gymnasium, agentrl.env
    env = gymnasium.make("agentrl/DeepResearch-v0", config={"suite": "envs/alphabet-2025"})
"""

from __future__ import annotations

import gymnasium

from agentrl.env.config import Budgets, CacheConfig, EnvConfig, FetchConfig, SearchConfig, load_env_config
from agentrl.env.parser import ParsedCall, ParsedTurn, ParseError, parse_turn
from agentrl.env.research_env import ResearchEnv
from agentrl.env.suite import Suite, Task, load_suite

__all__ = [
    "ENV_ID",
    "Budgets",
    "CacheConfig",
    "EnvConfig",
    "FetchConfig",
    "ParseError",
    "ParsedCall",
    "ParsedTurn",
    "ResearchEnv",
    "SearchConfig",
    "Suite",
    "Task",
    "load_env_config",
    "load_suite",
    "parse_turn",
]

ENV_ID = "agentrl/DeepResearch-v0"

if ENV_ID not in gymnasium.registry:
    # gymnasium's passive env checker breaks when the first reset raises (an unknown task): the
    # next step dies in the checker with "cannot unpack non-iterable NoneType". The env passes
    # gymnasium's full check_env in our tests instead; gymnasium.make(..., disable_env_checker=False)
    # still turns it on.
    gymnasium.register(
        id=ENV_ID, entry_point="agentrl.env.research_env:ResearchEnv", disable_env_checker=True
    )
