"""Replay stored trajectories (layer 5): re-score them under a new rubric or judge, rebuild the exact
training tensors, and re-run their episodes from a recorded tool cache. See ``docs/replay.md``."""

from agentrl.learn.critic import load_critic
from agentrl.replay.inputs import load_tokenizer, load_trajectories, pick
from agentrl.replay.rerun import RerunResult, format_rerun, rerun
from agentrl.replay.rescore import (
    CriterionDelta,
    RescoreReport,
    TrajectoryDelta,
    compare_rewards,
    format_deltas,
    report_json,
    rescore,
)
from agentrl.replay.steps import step_of
from agentrl.replay.tensors import (
    NUMBER_FIELDS,
    Rebuilt,
    ReplaySettings,
    rebuild_batch,
    resolve_settings,
    row_numbers,
    save_tensors,
)
from agentrl.rundir import RunDir

__all__ = [
    "NUMBER_FIELDS",
    "CriterionDelta",
    "Rebuilt",
    "ReplaySettings",
    "RerunResult",
    "RescoreReport",
    "RunDir",
    "TrajectoryDelta",
    "compare_rewards",
    "format_deltas",
    "format_rerun",
    "load_critic",
    "load_tokenizer",
    "load_trajectories",
    "pick",
    "rebuild_batch",
    "report_json",
    "rerun",
    "rescore",
    "resolve_settings",
    "row_numbers",
    "save_tensors",
    "step_of",
]
