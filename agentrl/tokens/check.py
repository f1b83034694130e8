"""``check`` modes: compare an expanded row with a full render of the conversation, by segment.

The reference is the template's render of the whole conversation (or of its history up to the
first fork, where the template rewrites earlier turns), tokenized in one call. Differences are
found with a token diff and attributed to the segments of the row that they touch.

- ``strict``: ids must match, except inside a sampled turn, where the sampled ids may be a
  different split of the same bytes ("H" + "ello" for "Hello"): TITO keeps what was sampled.
- ``ignore_whitespace``: like strict, but differences made only of whitespace are allowed
  (templates that ``trim`` content or add separators the policy did not sample).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentrl.tokens.arrays import Segment
from agentrl.tokens.template import message_to_template
from agentrl.trajectory import Trajectory

if TYPE_CHECKING:
    from agentrl.tokens.expander import Expander

__all__ = ["SegmentDiff", "format_diffs", "segment_diffs"]


@dataclass(frozen=True)
class SegmentDiff:
    """One difference: the row's segment it falls in, and the got/expected token ranges as text."""

    kind: str
    message_index: int
    turn: int
    start: int
    got: str
    expected: str
    same_text: bool


def _reference(exp: Expander, traj: Trajectory, ids: list[int], segments: list[Segment], forks: list[int]):
    """(got ids, expected ids, segments) cut at the first fork or at a turn cut by the length limit."""
    t = exp.template
    msgs = traj.messages
    tm = [message_to_template(m, exp.tool_arguments) for m in msgs]
    gen_segs = [s for s in segments if s.kind in ("sampled", "retokenized")]
    cut_msg: int | None = None
    if forks:
        before = [s for s in gen_segs if s.message_index < forks[0]]
        cut_msg = before[-1].message_index if before else None
        if cut_msg is None:
            return [], [], []
    elif (
        gen_segs
        and gen_segs[-1].kind == "sampled"
        and msgs[gen_segs[-1].message_index].finish_reason == "length"
    ):
        cut_msg = gen_segs[-1].message_index
    if cut_msg is None:
        text = t.render(tm, add_generation_prompt=False)
        got = list(ids)
    else:
        end = next(s.end for s in gen_segs if s.message_index == cut_msg)
        text = t.render(tm[: cut_msg + 1], add_generation_prompt=False)
        if exp.tail and text.endswith(exp.tail):
            text = text[: -len(exp.tail)]
        got = list(ids[:end])
        segments = [s for s in segments if s.start < end]
    expected = t.encode(text)
    # A sampled stop token that the render leaves out (the end of the text, or a next-role header
    # that the render writes only when a message follows) is not a difference.
    if got and got[-1] in exp.stop_ids and (not expected or expected[-1] != got[-1]):
        got = got[:-1]
    return got, expected, segments


def segment_diffs(
    exp: Expander, traj: Trajectory, ids: list[int], segments: list[Segment], forks: list[int], mode: str
) -> list[SegmentDiff]:
    """The differences between the row and the full render that ``mode`` does not allow."""
    got, expected, segments = _reference(exp, traj, ids, segments, forks)
    dec = exp.template.decode
    p = 0
    while p < min(len(got), len(expected)) and got[p] == expected[p]:
        p += 1
    s = 0
    while s < min(len(got), len(expected)) - p and got[-1 - s] == expected[-1 - s]:
        s += 1
    g_mid, e_mid = got[p : len(got) - s], expected[p : len(expected) - s]
    if not g_mid and not e_mid:
        return []
    sm = difflib.SequenceMatcher(None, g_mid, e_mid, autojunk=False)
    out: list[SegmentDiff] = []
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            continue
        a, b = p + i1, p + i2
        seg = next((x for x in segments if x.start <= a < x.end), None) or next(
            (x for x in reversed(segments) if x.start <= max(a - 1, 0)), segments[-1] if segments else None
        )
        got_text, exp_text = dec(got[a:b]), dec(expected[p + j1 : p + j2])
        same = got_text == exp_text
        inside_sampled = seg is not None and seg.kind == "sampled" and b <= seg.end
        if same and inside_sampled:
            continue  # a non-canonical split of the same text, kept as sampled
        if mode == "ignore_whitespace" and "".join(got_text.split()) == "".join(exp_text.split()):
            continue
        out.append(
            SegmentDiff(
                kind=seg.kind if seg else "?",
                message_index=seg.message_index if seg else -1,
                turn=seg.turn if seg else -1,
                start=a,
                got=got_text,
                expected=exp_text,
                same_text=same,
            )
        )
    return out


def format_diffs(diffs: list[SegmentDiff], limit: int = 5) -> str:
    """A readable summary: one line per differing segment, the first ``limit`` of them."""
    lines = [f"{len(diffs)} difference(s) from the full render"]
    for d in diffs[:limit]:
        lines.append(
            f"  {d.kind} segment (message {d.message_index}, turn {d.turn}) at token {d.start}: "
            f"got {d.got[:60]!r}, render has {d.expected[:60]!r}"
            + (" (same text, different token split)" if d.same_text else "")
        )
    if len(diffs) > limit:
        lines.append(f"  ... and {len(diffs) - limit} more")
    return "\n".join(lines)
