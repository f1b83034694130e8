"""Trajectories: the pydantic data model and the append-only JSONL store (layer 0)."""

from agentrl.trajectory.models import (
    SCHEMA_VERSION,
    VERDICTS,
    CriterionScore,
    FunctionCall,
    Message,
    RewardBreakdown,
    ToolCall,
    Trajectory,
    Verdict,
)
from agentrl.trajectory.outcome import answer_report, first_answer, report_of, unanswered_reward
from agentrl.trajectory.reward import normalize, normalized_reward, training_reward
from agentrl.trajectory.store import TornLineWarning, TrajectoryStore, read_trajectories, write_trajectories

__all__ = [
    "SCHEMA_VERSION",
    "VERDICTS",
    "CriterionScore",
    "FunctionCall",
    "Message",
    "RewardBreakdown",
    "ToolCall",
    "TornLineWarning",
    "Trajectory",
    "TrajectoryStore",
    "Verdict",
    "answer_report",
    "first_answer",
    "normalize",
    "normalized_reward",
    "read_trajectories",
    "report_of",
    "training_reward",
    "unanswered_reward",
    "write_trajectories",
]
