"""The rubric judge: rubric YAML, deterministic graders, the LLM judge (litellm), mapping and aggregation.

Layer 1 (what it may import: docs/architecture.md). litellm is imported on the first LLM call,
never here, so importing this package is cheap.

>>> from agentrl.judge import load_rubric, score_deterministic
>>> rubric = load_rubric("rubrics/alphabet-2025-q1-cloud-offline.yaml")  # doctest: +SKIP
>>> score_deterministic(rubric, report).total  # doctest: +SKIP
2.5
"""

from agentrl.judge.cache import VerdictCache
from agentrl.judge.config import JudgeConfig
from agentrl.judge.credit import evidence_turn_credit
from agentrl.judge.evidence import Evidence, evidence_of
from agentrl.judge.graders import find_numbers, grade_criterion, score_deterministic
from agentrl.judge.llm import Judge, make_judge, score_trajectories
from agentrl.judge.parse import ParsedReply, normalize_verdict, parse_reply
from agentrl.judge.prompt import build_messages, prompt_hash
from agentrl.judge.record import record_reward, resolve_rubric, rubric_record
from agentrl.judge.rubric import Criterion, Rubric, load_rubric, parse_rubric
from agentrl.judge.score import (
    aggregate,
    apply_requires,
    breakdown,
    map_verdict,
    normalize,
    normalized_reward,
)
from agentrl.judge.summary import JudgeSummary, summarize

__all__ = [
    "Criterion",
    "Evidence",
    "Judge",
    "JudgeConfig",
    "JudgeSummary",
    "ParsedReply",
    "Rubric",
    "VerdictCache",
    "aggregate",
    "apply_requires",
    "breakdown",
    "build_messages",
    "evidence_of",
    "evidence_turn_credit",
    "find_numbers",
    "grade_criterion",
    "load_rubric",
    "make_judge",
    "map_verdict",
    "normalize",
    "normalize_verdict",
    "normalized_reward",
    "parse_reply",
    "parse_rubric",
    "prompt_hash",
    "record_reward",
    "resolve_rubric",
    "rubric_record",
    "score_deterministic",
    "score_trajectories",
    "summarize",
]
