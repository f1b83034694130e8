"""The trajectory browser's HTML: each trajectory as a chat, the policy's tokens coloured by their
advantage (masked tokens greyed), then the rubric verdicts with the judge's reasoning.

Everything from a trajectory (ids, messages, tool arguments, verdict reasoning) is model or user
text and goes through ``html.escape``; element ids are generated (``t0``, ``t1``, ...), never
taken from the data.
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

import numpy as np

from agentrl.explain.report.tokens import FIELD_LABELS, TokenRow
from agentrl.trajectory import Trajectory

__all__ = ["BUCKETS", "advantage_scale", "bucket_class", "render_trajectory", "text_html"]

#: Colour buckets on each side of zero (classes n5..n1, z, p1..p5).
BUCKETS = 5


def advantage_scale(rows: list[TokenRow]) -> float:
    """The |advantage| that gets the strongest colour: the 98th percentile over every coloured
    token of ``rows`` (a few outliers do not wash the rest out); 1.0 when there is none."""
    vals = [np.abs(r.values["advantages"][~np.isnan(r.values["advantages"])]) for r in rows if r.coloured]
    flat = np.concatenate(vals) if vals else np.zeros(0)
    if flat.size == 0:
        return 1.0
    scale = float(np.percentile(flat, 98))
    return scale if scale > 1e-12 else 1.0


def bucket_class(adv: float, scale: float) -> str:
    """CSS class of an advantage: ``z`` near 0, ``p1``..``p5`` above, ``n1``..``n5`` below."""
    b = max(-BUCKETS, min(BUCKETS, round(adv / scale * BUCKETS)))
    return "z" if b == 0 else (f"p{b}" if b > 0 else f"n{-b}")


# C0 controls (but tab and newline) and DEL shown as their Unicode control pictures, never raw.
_CONTROLS = {c: chr(0x2400 + c) for c in range(32) if c not in (9, 10)} | {127: "\u2421"}


def text_html(s: str) -> str:
    """``s`` escaped for HTML text or attributes, control characters made visible."""
    return escape(s.translate(_CONTROLS))


#: Characters of one message shown; a longer one (a whole fetched page, say) is cut, and says so.
MAX_MESSAGE_CHARS = 20_000


def _long_text(s: str) -> str:
    if len(s) <= MAX_MESSAGE_CHARS:
        return text_html(s)
    cut = len(s) - MAX_MESSAGE_CHARS
    return (
        text_html(s[:MAX_MESSAGE_CHARS]) + f'<span class="cut">[… {cut:,} more characters not shown]</span>'
    )


def _num(v: Any, digits: int = 4) -> str:
    if v is None:
        return "–"
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return f"{v:.{digits}g}" if isinstance(v, float) else escape(str(v))


def _tokens_html(row: TokenRow, start: int, end: int, scale: float) -> str:
    adv = row.values.get("advantages")
    if adv is None:  # no numbers for this row at all: the turn's text, token by token but plain
        return "".join(text_html(row.texts[t]) for t in range(start, end))
    parts = []
    for t in range(start, end):
        body = text_html(row.texts[t])  # empty for the tail of a character split over tokens
        if not row.loss_mask[t]:
            parts.append(f'<span class="m" title="t={t} masked">{body}</span>')
            continue
        if np.isnan(adv[t]):
            parts.append(
                f'<span class="u" title="t={t} policy token, not in the update (cut at max_len)">{body}</span>'
            )
            continue
        tip = " · ".join(
            f"{label} {float(row.values[name][t]):+.4g}"
            for name, label in FIELD_LABELS.items()
            if name in row.values and not np.isnan(row.values[name][t])
        )
        parts.append(
            f'<span class="{bucket_class(float(adv[t]), scale)}" title="t={t} · {tip}">{body}</span>'
        )
    return "".join(parts)


def _turn_ranges(row: TokenRow | None) -> dict[int, tuple[int, int]]:
    """Message index → [start, end) of its sampled or retokenized tokens."""
    if row is None:
        return {}
    return {s.message_index: (s.start, s.end) for s in row.segments if s.kind in ("sampled", "retokenized")}


def _tool_calls_html(msg: Any) -> str:
    if not msg.tool_calls or msg.tool_call_format:  # parsed out of the text: already in the content
        return ""
    calls = "".join(
        f'<div class="call"><b>{escape(c.function.name)}</b>(<code>{text_html(c.function.arguments)}</code>)</div>'
        for c in msg.tool_calls
    )
    return f'<div class="calls">{calls}</div>'


def _messages_html(traj: Trajectory, row: TokenRow | None, scale: float) -> str:
    ranges = _turn_ranges(row)
    out = []
    for i, m in enumerate(traj.messages):
        who = escape(m.role) + (f" · {escape(m.name)}" if m.name else "")
        if m.role == "tool" and m.tool_call_id:
            who += f" · {escape(m.tool_call_id)}"
        extra = ""
        if m.reasoning_content:
            extra = f'<details class="reasoning"><summary>reasoning</summary>{text_html(m.reasoning_content)}</details>'
        if m.role == "assistant" and row is not None and i in ranges:
            a, b = ranges[i]
            body = f'<div class="body tokens">{_tokens_html(row, a, b, scale)}</div>'
            if m.finish_reason:
                who += f" · finish: {escape(m.finish_reason)}"
        else:
            body = f'<div class="body">{_long_text(m.text)}</div>'
        masked = " masked" if m.role != "assistant" else ""
        out.append(
            f'<div class="msg {escape(m.role)}{masked}"><div class="who">{who}</div>'
            f"{extra}{body}{_tool_calls_html(m)}</div>"
        )
    return f'<div class="chat">{"".join(out)}</div>'


def _verdicts_html(traj: Trajectory, own: dict[str, tuple[str, str]]) -> str:
    r = traj.reward
    if r is None:
        return '<p class="note">Not judged (reward is null).</p>'
    head = (
        f"<p>Reward <b>{_num(r.total)}</b> · status <b>{escape(r.status)}</b>"
        + (f" · rubric {escape(r.rubric_id)}" if r.rubric_id else "")
        + (f" · judge {escape(r.judge_model)}" if r.judge_model else "")
        + (f" · {r.calls} judge calls, ${r.cost_usd:.4f}" if r.calls or r.cost_usd else "")
        + "</p>"
    )
    if r.error and r.status == "judge_error":
        head += f'<p class="error">Judge error: {escape(r.error)}</p>'
    elif r.error:  # scored without a judge's failure: why it scored so (an unanswered episode's 0)
        head += f'<p class="note">Scored {_num(r.total)}: {escape(r.error)}</p>'
    if not r.criteria:
        return head
    rows = []
    for c in r.criteria:
        text = own.get(c.id, ("", ""))[1]
        verdict_cls = {"Fully Satisfied": "full", "Partially Satisfied": "part", "Not Satisfied": "not"}.get(
            c.verdict or "", ""
        )
        rows.append(
            f"<tr><td><b>{escape(c.id)}</b><div class='crit-text'>{escape(text)}</div></td>"
            f"<td>{escape(c.kind)}</td><td>{_num(c.weight)}</td>"
            f'<td class="verdict {verdict_cls}">{escape(c.verdict or "–")}</td><td>{_num(c.score)}</td>'
            f"<td>{escape(c.grader)}</td><td class='reasoning-cell'>{text_html(c.reasoning or '')}</td></tr>"
        )
    return (
        head + '<table class="verdicts"><thead><tr><th>criterion</th><th>kind</th><th>weight</th>'
        "<th>verdict</th><th>score</th><th>grader</th><th>judge's reasoning</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def render_trajectory(
    traj: Trajectory,
    *,
    elem_id: str,
    step: int,
    row: TokenRow | None,
    row_note: str | None,
    scale: float,
    criterion_texts: dict[str, tuple[str, str]] | None = None,
) -> str:
    """One ``<article class="traj">``: a header, the colouring note, the chat and the verdicts
    (with ``criterion_texts``: id → (kind, text) of the rubric that scored it; an id can mean
    another thing in another task's rubric)."""
    info = traj.info
    facts = [f"step {step}", f"task {escape(traj.task_id)}"]
    for key, label in (("turns", "turns"), ("tool_calls", "tool calls"), ("format_errors", "format errors")):
        if isinstance(info.get(key), int | float):
            facts.append(f"{label} {_num(info[key])}")
    if info.get("truncated_reason"):
        facts.append(f"truncated: {escape(str(info['truncated_reason']))}")
    elif info.get("terminated"):
        facts.append("answered")
    note = row_note if row is None else row.note
    note_html = f'<p class="note">Tokens not coloured: {escape(note)}.</p>' if note else ""
    return (
        f'<article class="traj" id="{elem_id}" data-step="{step}">'
        f"<h3>{text_html(traj.id)}</h3><p class='facts'>{' · '.join(facts)}</p>{note_html}"
        f"{_messages_html(traj, row, scale)}<h4>Rubric verdicts</h4>{_verdicts_html(traj, criterion_texts or {})}"
        "</article>"
    )
