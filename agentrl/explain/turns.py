"""A trajectory as the agent lived it: one entry per assistant turn with its thought, its tool
calls, the observations that came back, and the final report."""

from __future__ import annotations

import json
import re

from pydantic import BaseModel, Field

from agentrl.trajectory import Message, Trajectory
from agentrl.trajectory.tools import TOOLS, tool_arg, tools_with_role

__all__ = ["TurnView", "format_turns", "trajectory_turns"]

_THINK = re.compile(r"<think>(.*?)(?:</think>|$)", re.S)
_WORD = re.compile(r"\S+")
_CALLS = re.compile(
    r"<tool_call>.*?(?:</tool_call>|$)|<(" + "|".join(map(re.escape, TOOLS)) + r")>.*?</\1>", re.S
)  # a Hermes call, or a Search-R1 tag of a tool


class TurnView(BaseModel):
    """Assistant turn ``turn`` (0-based, as the expander's ``turn_ids``)."""

    turn: int
    message_index: int
    thought: str = ""
    calls: list[str] = Field(default_factory=list)
    """Each call as ``name {"arg": ...}``."""
    observations: list[str] = Field(default_factory=list)
    report: str | None = None

    @property
    def label(self) -> str:
        """A short name of the decision taken: the first call, or ``report``."""
        if self.calls:
            return self.calls[0]
        return "report" if self.report is not None else "(no call)"


def _thought(m: Message) -> str:
    parts = [m.reasoning_content or ""]
    text = m.text
    parts += [t.strip() for t in _THINK.findall(text)]
    rest = _CALLS.sub("", _THINK.sub("", text)).strip()
    if m.tool_calls or "<tool_call>" in text:
        parts.append(rest)  # text around the calls is the agent thinking aloud
    return "\n".join(p for p in parts if p).strip()


def trajectory_turns(traj: Trajectory) -> list[TurnView]:
    """The assistant turns of ``traj`` with what each did and saw."""
    out: list[TurnView] = []
    asst = [i for i, m in enumerate(traj.messages) if m.role == "assistant"]
    for k, i in enumerate(asst):
        m = traj.messages[i]
        view = TurnView(turn=k, message_index=i, thought=_thought(m))
        for call in m.tool_calls or []:
            try:
                args = call.function.parsed_arguments()
            except ValueError:
                args = call.function.arguments
            if (report := tool_arg(call.function.name, "answer", args)) is not None:
                view.report = report
                view.calls.append(call.function.name)
                continue
            view.calls.append(f"{call.function.name} {json.dumps(args, ensure_ascii=False)}")
        if not m.tool_calls and k == len(asst) - 1 and "<tool_call>" not in m.text:
            view.report = _THINK.sub("", m.text).strip()
            view.thought = "\n".join(
                p for p in [m.reasoning_content or "", *_THINK.findall(m.text)] if p
            ).strip()
        end = asst[k + 1] if k + 1 < len(asst) else len(traj.messages)
        view.observations = [o.text for o in traj.messages[i + 1 : end] if o.role in ("tool", "user")]
        out.append(view)
    return out


def _short(text: str, limit: int) -> str:
    """``text`` on one line (each whitespace run as one space), cut to ``limit`` characters with an
    ellipsis. Copies only the words it shows, so a 50 MB observation costs no more than a short one."""
    words: list[str] = []
    n = -1
    for m in _WORD.finditer(text):
        words.append(text[m.start() : min(m.end(), m.start() + limit + 1)])
        n += 1 + len(words[-1])
        if n > limit:
            break
    one = " ".join(words)
    return one if len(one) <= limit else one[: limit - 1] + "…"


def format_turns(turns: list[TurnView], width: int = 160) -> str:
    """The turns as indented text: thought, tool call, observation (first ``width`` characters), report."""
    lines: list[str] = []
    for v in turns:
        lines.append(f"turn {v.turn}")
        if v.thought:
            lines.append(f"  thought      {_short(v.thought, width)}")
        for c in v.calls:
            if c not in tools_with_role("answer"):
                lines.append(f"  tool call    {_short(c, width)}")
        for o in v.observations:
            lines.append(f"  observation  {_short(o, width)}  ({len(o)} chars)")
        if v.report is not None:
            lines.append(f"  report       {_short(v.report, 4 * width)}")
    return "\n".join(lines)
