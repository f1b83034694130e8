"""The trajectory data model: OpenAI-format chat messages, TITO data and the reward breakdown.

A ``Trajectory`` is what every part of agentrl passes around and what the JSONL store holds, one
per line. ``Trajectory.to_json()`` is canonical: parsing its output and dumping again gives the
same bytes, so stored runs can be diffed, hashed and replayed.
"""

from __future__ import annotations

import json
import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agentrl.jsonl import dumps
from agentrl.trajectory.tools import ANSWER, tools_with_role

__all__ = [
    "SCHEMA_VERSION",
    "VERDICTS",
    "CriterionScore",
    "FunctionCall",
    "Message",
    "RewardBreakdown",
    "ToolCall",
    "Trajectory",
    "Verdict",
]

#: The version written into every new trajectory; readers refuse versions they do not know.
SCHEMA_VERSION = 1

Verdict = Literal["Fully Satisfied", "Partially Satisfied", "Not Satisfied"]
VERDICTS: tuple[str, ...] = ("Fully Satisfied", "Partially Satisfied", "Not Satisfied")

Role = Literal["system", "user", "assistant", "tool"]


class FunctionCall(BaseModel):
    """The function part of an OpenAI tool call; ``arguments`` is a JSON string, as in the API."""

    model_config = ConfigDict(extra="allow")

    name: str
    arguments: str = "{}"

    def parsed_arguments(self) -> Any:
        """The arguments decoded from JSON; raises ``ValueError`` when they are not valid JSON."""
        try:
            return json.loads(self.arguments) if self.arguments.strip() else {}
        except RecursionError:  # nested too deeply for json: as invalid as a syntax error
            raise ValueError("the arguments are nested too deeply") from None


class ToolCall(BaseModel):
    """One OpenAI-format tool call on an assistant message."""

    model_config = ConfigDict(extra="allow")

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(BaseModel):
    """One chat message in OpenAI format, plus the token-in-token-out (TITO) data of sampled turns.

    ``token_ids`` are exactly the ids the policy sampled for an assistant turn (its stop token
    included when it sampled one) and ``logprobs`` their log-probabilities under the sampling
    policy. Unknown OpenAI fields (``refusal``, ``annotations``, ...) are kept, not dropped.
    """

    model_config = ConfigDict(extra="allow")

    role: Role
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    finish_reason: str | None = None
    tool_call_format: str | None = None
    """Set by the env when it parsed ``tool_calls`` out of the text ``content`` (``hermes``,
    ``search_r1``): the calls are already in the content, so renderers must not write them again."""

    @model_validator(mode="after")
    def _check_tito(self) -> Message:
        if self.role != "assistant" and (self.token_ids is not None or self.logprobs is not None):
            raise ValueError(
                f"token_ids/logprobs belong on assistant messages only, not on role {self.role!r}"
            )
        if self.logprobs is not None and self.token_ids is None:
            raise ValueError("logprobs given without token_ids")
        if self.logprobs is not None and len(self.logprobs) != len(self.token_ids or []):
            raise ValueError(
                f"logprobs has {len(self.logprobs)} entries but token_ids has {len(self.token_ids or [])}"
            )
        if self.tool_calls is not None and self.role != "assistant":
            raise ValueError(f"tool_calls belong on assistant messages only, not on role {self.role!r}")
        return self

    @property
    def text(self) -> str:
        """The message text: ``content`` as a string, text parts joined when it is a list of parts."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(str(p.get("text", "")) for p in self.content if p.get("type", "text") == "text")


class CriterionScore(BaseModel):
    """One rubric criterion as graded: the enumerated verdict, the mapped score (on [0, 1], as every
    verdict mapping gives) and its provenance. Numbers are finite (``RewardBreakdown`` says why)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    id: str
    verdict: Verdict | None = None
    score: float = Field(ge=0.0, le=1.0)
    weight: float
    kind: Literal["positive", "negative"] = "positive"
    grader: str = "llm"
    reasoning: str | None = None
    judge_model: str | None = None
    rubric_hash: str | None = None
    prompt_hash: str | None = None


class RewardBreakdown(BaseModel):
    """The reward of a trajectory: the total and how it was reached.

    ``status == "judge_error"`` means the judge failed after its retries: ``total`` is then null
    and training must exclude the trajectory (it is never scored 0 or 1 silently). ``normalized``
    is the total on [0, 1] as the judge computed it from the rubric (null on rewards written before
    it existed, and on rewards no judge made; ``agentrl.judge.normalized_reward`` reads it).

    A reward is a number only when it is one the rubric could give, checked here so that every
    reader (eval, eval compare, replay, report, the trainer's batch) refuses the same records, with
    the file, line and field (``agentrl.trajectory.store``): every number is finite (NaN and
    infinities are errors, never a statistic's input), ``normalized`` is on [0, 1], and ``total`` is
    within what its recorded criteria allow (Σ negative weights ≤ total ≤ Σ positive weights for a
    weighted sum, scores being on [0, 1]; [0, 1] for the ``normalized`` aggregation).
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    total: float | None
    status: Literal["ok", "judge_error"] = "ok"
    normalized: float | None = Field(default=None, ge=0.0, le=1.0)
    criteria: list[CriterionScore] = Field(default_factory=list)
    rubric_id: str | None = None
    rubric_hash: str | None = None
    judge_model: str | None = None
    mapping: str | None = None
    aggregation: str | None = None
    error: str | None = None
    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    @field_validator("total", "normalized", mode="before")
    @classmethod
    def _a_number_not_a_flag(cls, v: Any) -> Any:
        if isinstance(v, bool):  # JSON true would read as 1.0: a number was meant, or a bug wrote it
            raise ValueError(f"a reward is a number, not {str(v).lower()}")
        return v

    @model_validator(mode="after")
    def _check_status(self) -> RewardBreakdown:
        if self.status == "ok" and self.total is None:
            raise ValueError("a reward with status 'ok' needs a total")
        if self.status == "judge_error" and self.total is not None:
            raise ValueError("a reward with status 'judge_error' must have total null, never a made-up score")
        if self.status == "judge_error" and self.normalized is not None:
            raise ValueError("a reward with status 'judge_error' must have normalized null")
        if self.total is not None:
            low, high = self.total_range()
            slack = 1e-9 * max(1.0, high - low)  # a sum of weights may miss its bound by an ulp
            if not low - slack <= self.total <= high + slack:
                raise ValueError(
                    f"total {self.total:g} is outside [{low:g}, {high:g}], the range "
                    + (
                        "of the 'normalized' aggregation"
                        if self.aggregation == "normalized"
                        else "its criteria allow"
                    )
                )
        return self

    def total_range(self) -> tuple[float, float]:
        """The least and the greatest total the rubric could give, as far as this reward records it:
        [0, 1] for the ``normalized`` aggregation, else [Σ negative weights, Σ positive weights] of
        the criteria; unbounded when no criterion is recorded (an unanswered episode's 0, a total
        recorded without its criteria)."""
        if self.aggregation == "normalized":
            return 0.0, 1.0
        if not self.criteria:
            return -math.inf, math.inf
        return sum(min(c.weight, 0.0) for c in self.criteria), sum(max(c.weight, 0.0) for c in self.criteria)


class Trajectory(BaseModel):
    """One episode: the task, the chat messages, the reward once judged, and env metadata in ``info``."""

    model_config = ConfigDict(extra="forbid")

    id: str
    task_id: str
    messages: list[Message]
    reward: RewardBreakdown | None = None
    info: dict[str, Any] = Field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    # ---- canonical JSON -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A plain dict in canonical key order; optional message fields that are null are left out."""
        return {
            "id": self.id,
            "task_id": self.task_id,
            "messages": [m.model_dump(mode="python", exclude_none=True) for m in self.messages],
            "reward": None if self.reward is None else self.reward.model_dump(mode="python"),
            "info": self.info,
            "schema_version": self.schema_version,
        }

    def to_json(self) -> str:
        """One line of canonical, strict JSON (no newline). A number that is not finite (in ``info``,
        say; the reward's cannot be one) raises ``ValueError`` naming the trajectory and the field."""
        d = self.to_dict()
        try:
            s = dumps(d, ensure_ascii=False, separators=(",", ":"))
        except ValueError as e:
            raise ValueError(f"trajectory {self.id!r}: {e}") from None
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate cannot be UTF-8: escape it, still valid JSON
            s = dumps(d, ensure_ascii=True, separators=(",", ":"))
        return s

    @classmethod
    def from_json(cls, line: str | bytes) -> Trajectory:
        """Parse one stored line; raises ``SchemaVersionError`` for an unknown ``schema_version``."""
        from agentrl.errors import SchemaVersionError

        data = json.loads(line)
        if not isinstance(data, dict):
            raise ValueError(f"a trajectory line must be a JSON object, got {type(data).__name__}")
        version = data.get("schema_version", SCHEMA_VERSION)
        if version != SCHEMA_VERSION:
            raise SchemaVersionError(
                f"schema_version {version!r} is not supported (this agentrl reads version {SCHEMA_VERSION})"
                + ("; upgrade agentrl" if isinstance(version, int) and version > SCHEMA_VERSION else "")
            )
        return cls.model_validate(data)

    # ---- convenience views ------------------------------------------------------------------
    def prompt(self) -> str:
        """The first user message's text (the task as the agent saw it)."""
        return next((m.text for m in self.messages if m.role == "user"), "")

    def final_report(self) -> str:
        """The final report as the env decided it (``agentrl.trajectory.outcome.report_of``): the
        ``report`` of the first valid ``answer`` call; "" when the episode gave no report."""
        return report_of(self) or ""


# ---- the outcome rules (``agentrl.trajectory.outcome`` documents them) ----------------------------
#: ``info["status"]`` values written by the env.
ANSWERED, UNANSWERED, RUNNING = "answered", "unanswered", "running"


def answer_report(arguments: Any) -> str | None:
    """The report of an ``answer`` call with these decoded arguments: exactly ``{"report": <string>}``;
    None for anything else (the env answers such a call with an argument error)."""
    key = ANSWER.arg
    if isinstance(arguments, dict) and set(arguments) == {key} and isinstance(arguments[key], str):
        return arguments[key]
    return None


def first_answer(message: Message) -> tuple[int, str] | None:
    """``(index, report)`` of the first valid ``answer`` call among ``message.tool_calls``, else None."""
    for i, call in enumerate(message.tool_calls or []):
        if call.function.name not in tools_with_role("answer"):
            continue
        try:
            report = answer_report(call.function.parsed_arguments())
        except ValueError:
            continue
        if report is not None:
            return i, report
    return None


def report_of(trajectory: Trajectory) -> str | None:
    """The episode's report, or None when it gave none.

    A trajectory written by the env carries the env's decision (``info["status"]`` and
    ``info["report"]``), returned as is. For one the env did not write (a hand-built trajectory, an
    older file), the same rule is read off the messages: the first valid ``answer`` call, else the
    first assistant turn without tool calls that was not cut at the token limit.
    """
    info = trajectory.info or {}
    if info.get("status") in (ANSWERED, UNANSWERED, RUNNING):
        report = info.get("report")
        return report if info["status"] == ANSWERED and isinstance(report, str) else None
    for m in trajectory.messages:
        if m.role != "assistant":
            continue
        found = first_answer(m)
        if found is not None:
            return found[1]
        if not m.tool_calls and m.finish_reason != "length":
            return m.text
    return None
