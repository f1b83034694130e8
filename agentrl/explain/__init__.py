"""Explain what the RL math did, token by token (layer 5)."""

from agentrl.explain.arrays import (
    ArraysInput,
    Explanation,
    explain_arrays,
    format_json,
    format_table,
    load_arrays,
)
from agentrl.explain.trajectory import (
    MaskedSpan,
    TrajectoryExplanation,
    TurnCredit,
    explain_trajectory,
    format_trajectory,
    format_trajectory_json,
)
from agentrl.explain.turns import TurnView, format_turns, trajectory_turns

__all__ = [
    "ArraysInput",
    "Explanation",
    "MaskedSpan",
    "TrajectoryExplanation",
    "TurnCredit",
    "TurnView",
    "explain_arrays",
    "explain_trajectory",
    "format_json",
    "format_table",
    "format_trajectory",
    "format_trajectory_json",
    "format_turns",
    "load_arrays",
    "trajectory_turns",
]
