"""Context management: what the model saw of a long episode after its context was rewritten.

A long episode outgrows ``max_len``. The episode loop (``agentrl.rollout.episode``) rewrites the
context before a turn whose prompt would pass ``trigger_tokens``:

- ``drop_observations``: every tool result but those of the last ``keep_last_turns`` assistant turns
  is shown as a one-line stub (its title and URL, or the search it answered);
- ``summarize``: the policy is asked (``SUMMARY_REQUEST``, a user message after the last tool
  result) to write down what it has found; its reply is a sampled turn like any other, trained on
  the row of the segment that wrote it. The context then restarts from the system prompt and the
  task, with the summary appended to the task's message (``SUMMARY_HEADER``), followed by the last
  ``keep_last_turns`` assistant turns and their tool results verbatim.

The trajectory keeps every message whole (the judge's evidence graders read the pages the agent
opened); what changed is recorded in ``info["context_segments"]``: one entry per rewrite, the
assistant turn it came before, the number of messages then, the indices of the stubbed messages
and, for a summary, the task message as rewritten, where the verbatim turns start, the request and
the summary message (its sampled ids and log-probs). The turns before the first rewrite are segment
0; each rewrite starts the next.

``ContextView`` is the one rule that turns the env's messages into what the model saw; the loop
applies it live, ``segments(trajectory)`` reads the records back and ``segment_messages`` gives the
messages of one segment, which the expander renders into that segment's training row
(``agentrl.tokens.segments``): so each row is exactly the ids the model was fed and sampled.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentrl.trajectory.models import Message, Trajectory

__all__ = [
    "CONTEXT_SEGMENTS",
    "SUMMARY_HEADER",
    "SUMMARY_REQUEST",
    "ContextSegment",
    "ContextView",
    "segment_messages",
    "segments",
    "stub_indices",
    "stub_text",
    "view",
]

#: ``info`` key of a trajectory's context rewrites.
CONTEXT_SEGMENTS = "context_segments"

#: What ``summarize`` asks the policy at the trigger (a user message after the last tool result).
SUMMARY_REQUEST = (
    "Your context is almost full and older messages will be removed. Write notes on your research "
    "so far: every figure you found, with the URL of the page that printed it, the searches you ran, "
    "and what is left to look up. Write the notes only; do not call a tool."
)
#: What precedes the summary where it is appended to the task's message.
SUMMARY_HEADER = "Your notes so far (older messages were removed to save context):"

_TITLE = re.compile(r"^Title: (.+)$", re.MULTILINE)
_URL = re.compile(r"^URL: (\S+)$", re.MULTILINE)
_RESULTS = re.compile(r'^(Results for ".*?")', re.MULTILINE)


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
    return frozenset(
        i for i, m in enumerate(messages) if m.role == "tool" and i < keep_from(messages, keep_last_turns)
    )


def keep_from(messages: Sequence[Message], keep_last_turns: int) -> int:
    """The index of the first message of the last ``keep_last_turns`` assistant turns (the first
    assistant turn's when there are fewer; ``len(messages)`` when none is kept or there is none)."""
    assistants = [i for i, m in enumerate(messages) if m.role == "assistant"]
    if keep_last_turns <= 0 or not assistants:
        return len(messages)
    return assistants[-min(keep_last_turns, len(assistants))]


def summarized_task(task: str, summary: str) -> str:
    """The task's message after a ``summarize`` rewrite: the task, then the notes."""
    return f"{task}\n\n{SUMMARY_HEADER}\n{summary.strip()}"


@dataclass(frozen=True)
class ContextView:
    """How the env's messages are shown: the tool results in ``stubbed`` as stubs; after a summary,
    the first user message's content replaced by ``head`` and the messages between it and
    ``kept_from`` left out."""

    stubbed: frozenset[int] = frozenset()
    head: str | None = None
    kept_from: int = 0

    def show(self, messages: Sequence[Message]) -> list[Message]:
        """``messages`` as the model sees them."""
        msgs = view(messages, self.stubbed) if self.stubbed else list(messages)
        if self.head is None:
            return msgs
        u = next((i for i, m in enumerate(msgs) if m.role == "user"), None)
        if u is None:
            raise ValueError("a summarized context needs the task's user message")
        return [
            *msgs[:u],
            msgs[u].model_copy(update={"content": self.head}),
            *msgs[max(u + 1, self.kept_from) :],
        ]

    def turn_offset(self, messages: Sequence[Message]) -> int:
        """The number of the episode's assistant turns left out of the view (before ``kept_from``)."""
        return 0 if self.head is None else sum(m.role == "assistant" for m in messages[: self.kept_from])

    def after(self, record: Mapping[str, Any]) -> ContextView:
        """The view a rewrite ``record`` (an ``info["context_segments"]`` entry) starts."""
        if record.get("strategy") == "summarize":
            return ContextView(frozenset(), str(record["task"]), int(record["kept_from"]))
        return ContextView(frozenset(int(i) for i in record["stubbed"]), self.head, self.kept_from)


@dataclass(frozen=True)
class ContextSegment:
    """The turns ``[first_turn, end_turn)`` (assistant turns, 0-based; ``end_turn`` None: to the
    end), the ``context`` they were sampled in and, when the next rewrite is a summary, the request
    and the summary this segment wrote (``closing``) after its first ``end_messages`` messages."""

    index: int
    first_turn: int
    end_turn: int | None
    context: ContextView = field(default_factory=ContextView)
    closing: tuple[str, Message] | None = None
    end_messages: int | None = None

    @property
    def stubbed(self) -> frozenset[int]:
        return self.context.stubbed


def segments(trajectory: Trajectory) -> list[ContextSegment]:
    """The trajectory's context segments (one, shown whole, when it was never rewritten)."""
    raw: list[dict[str, Any]] = list(trajectory.info.get(CONTEXT_SEGMENTS) or [])
    views, ctx = [ContextView()], ContextView()
    for r in raw:
        ctx = ctx.after(r)
        views.append(ctx)
    out = []
    for k, ctx in enumerate(views):
        first = 0 if k == 0 else int(raw[k - 1]["turn"])
        nxt = raw[k] if k < len(raw) else None
        closing = None
        if nxt is not None and nxt.get("strategy") == "summarize":
            closing = (str(nxt["request"]), Message.model_validate(nxt["summary"]))
        end = None if nxt is None else int(nxt["turn"])
        out.append(ContextSegment(k, first, end, ctx, closing, None if nxt is None else int(nxt["messages"])))
    return out


def segment_messages(trajectory: Trajectory, segment: ContextSegment) -> list[Message]:
    """The messages the model saw in ``segment``: up to the segment's last assistant turn (the whole
    trajectory for the last segment), as its context showed them; for a segment that wrote a
    summary, every message before the summary call, the request and the summary."""
    msgs = list(trajectory.messages)
    if segment.closing is not None and segment.end_messages is not None:
        msgs = msgs[: segment.end_messages]
    elif segment.end_turn is not None:
        turn, cut = -1, len(msgs)
        for i, m in enumerate(msgs):
            if m.role == "assistant":
                turn += 1
                if turn == segment.end_turn - 1:
                    cut = i + 1
                    break
        msgs = msgs[:cut]
    shown = segment.context.show(msgs)
    if segment.closing is not None:
        request, summary = segment.closing
        shown += [Message(role="user", content=request), summary]
    return shown
