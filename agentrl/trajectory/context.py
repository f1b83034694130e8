"""Context management: what the model saw of a long episode after its context was rewritten.

A long episode outgrows ``max_len``. With ``drop_observations`` the episode loop (``agentrl.rollout
.episode``) rewrites the context before a turn whose prompt would pass ``trigger_tokens``: every
tool result but those of the last ``keep_last_turns`` assistant turns is shown as a one-line stub
(its title and URL, or the search it answered). The trajectory keeps every message whole (the
judge's evidence graders read the pages the agent opened); what changed is recorded in
``info["context_segments"]``: one entry per rewrite, the assistant turn it came before, the number
of messages then, and the indices of the stubbed messages. The turns before the first rewrite are
segment 0; each rewrite starts the next.

``segments(trajectory)`` reads them back and ``segment_messages`` gives the messages the model saw
in one segment, which the expander renders into that segment's training row
(``Expander.expand_segments``): the same stub text here for the loop and for the expander, so each
row is exactly the ids the model was fed and sampled.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentrl.trajectory.models import Message, Trajectory

__all__ = [
    "CONTEXT_SEGMENTS",
    "ContextSegment",
    "segment_messages",
    "segments",
    "stub_indices",
    "stub_text",
    "view",
]

#: ``info`` key of a trajectory's context rewrites.
CONTEXT_SEGMENTS = "context_segments"

_TITLE = re.compile(r"^Title: (.+)$", re.MULTILINE)
_URL = re.compile(r"^URL: (\S+)$", re.MULTILINE)
_RESULTS = re.compile(r'^(Results for ".*?")', re.MULTILINE)


@dataclass(frozen=True)
class ContextSegment:
    """The turns ``[first_turn, end_turn)`` (assistant turns, 0-based; ``end_turn`` None: to the
    end) and the message indices shown as stubs while they were sampled."""

    index: int
    first_turn: int
    end_turn: int | None
    stubbed: frozenset[int]


def stub_text(message: Message) -> str:
    """The one line a dropped tool result is shown as: its page's title and URL, or the search it
    answered, or its first line."""
    text = message.text
    title, url = _TITLE.search(text), _URL.search(text)
    if title or url:
        parts = [f"title: {title.group(1).strip()}" if title else "", f"url: {url.group(1)}" if url else ""]
        return "[dropped to save context; " + ", ".join(p for p in parts if p) + "]"
    results = _RESULTS.search(text)
    first = results.group(1) if results else (text.strip().splitlines() or [""])[0][:120]
    return f"[dropped to save context; {first}]"


def view(messages: Sequence[Message], stubbed: frozenset[int] | set[int]) -> list[Message]:
    """``messages`` as the model sees them: each index in ``stubbed`` (a tool result) as its stub."""
    return [
        m.model_copy(update={"content": stub_text(m)}) if i in stubbed and m.role == "tool" else m
        for i, m in enumerate(messages)
    ]


def stub_indices(messages: Sequence[Message], keep_last_turns: int) -> frozenset[int]:
    """The tool results to stub: all but those after the last ``keep_last_turns`` assistant turns."""
    assistants = [i for i, m in enumerate(messages) if m.role == "assistant"]
    if keep_last_turns <= 0:
        keep_from = len(messages)
    elif keep_last_turns >= len(assistants):
        keep_from = 0
    else:
        keep_from = assistants[-keep_last_turns]
    return frozenset(i for i, m in enumerate(messages) if m.role == "tool" and i < keep_from)


def segments(trajectory: Trajectory) -> list[ContextSegment]:
    """The trajectory's context segments (one, with nothing stubbed, when it was never rewritten)."""
    raw: list[dict[str, Any]] = list(trajectory.info.get(CONTEXT_SEGMENTS) or [])
    starts = [(0, frozenset[int]())] + [
        (int(r["turn"]), frozenset(int(i) for i in r["stubbed"])) for r in raw
    ]
    out = []
    for k, (first, stubbed) in enumerate(starts):
        end = starts[k + 1][0] if k + 1 < len(starts) else None
        out.append(ContextSegment(k, first, end, stubbed))
    return out


def segment_messages(trajectory: Trajectory, segment: ContextSegment) -> list[Message]:
    """The messages the model saw in ``segment``: up to the segment's last assistant turn (the whole
    trajectory for the last segment), with its stubs."""
    msgs = list(trajectory.messages)
    if segment.end_turn is not None:
        turn, cut = -1, len(msgs)
        for i, m in enumerate(msgs):
            if m.role == "assistant":
                turn += 1
                if turn == segment.end_turn - 1:
                    cut = i + 1
                    break
        msgs = msgs[:cut]
    return view(msgs, segment.stubbed)
