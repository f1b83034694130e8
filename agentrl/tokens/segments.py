"""One exact training row per context segment of a long episode.

An episode whose context the loop rewrote (``info["context_segments"]``, see
``agentrl.trajectory.context``) was sampled from several prompts that are not prefixes of each
other, so one row cannot hold it token for token. ``expand_segments`` gives one row per segment: the
messages the model saw in that segment (earlier tool results as their stubs) rendered by the
expander, with the loss on that segment's own sampled turns only (the earlier turns in it are the
segment's prompt, as the model was fed them). A segment that ended in a ``summarize`` rewrite also
trains the notes it wrote (the request and the summary close its row). Every row carries the
episode's reward on its last policy token, so every segment is trained on the episode's outcome; a
turn reward stays on the row of the segment that sampled the turn (a summary has none). An episode
that was never rewritten is one row, ``expand``'s.
"""

from __future__ import annotations

import dataclasses

from agentrl.tokens.arrays import TokenizedTrajectory
from agentrl.tokens.expander import Expander
from agentrl.trajectory import Trajectory
from agentrl.trajectory.context import CONTEXT_SEGMENTS, ContextSegment, segment_messages, segments

__all__ = ["expand_segments", "sampled_segments", "segment_row_id"]


def segment_row_id(trajectory_id: str, segment: int) -> str:
    """The id of a segment's row: the trajectory's id for segment 0, ``ID#k`` for segment k."""
    return trajectory_id if segment == 0 else f"{trajectory_id}#{segment}"


def expand_segments(
    expander: Expander, trajectory: Trajectory, *, reward: float | None = None
) -> list[TokenizedTrajectory]:
    """The rows of ``trajectory``, one per context segment, in order (see the module docstring)."""
    segs = segments(trajectory)
    if len(segs) == 1:
        return [expander.expand(trajectory, reward=reward)]
    rows = []
    for seg in segs:
        info = {k: v for k, v in trajectory.info.items() if k != CONTEXT_SEGMENTS}
        if seg.index > 0:
            info.pop("prompt_token_ids", None)  # the engine's first prompt is segment 0's
        offset = seg.context.turn_offset(trajectory.messages)  # episode turns left out of the view
        if isinstance(info.get("turn_rewards"), list):  # the turns this view holds (+ its notes: 0)
            end = len(info["turn_rewards"]) if seg.end_turn is None else seg.end_turn
            info["turn_rewards"] = info["turn_rewards"][offset:end] + [0.0] * (seg.closing is not None)
        if isinstance(info.get("turn_credit"), list):  # a share of the outcome: this segment's turns only
            end = len(info["turn_credit"]) if seg.end_turn is None else seg.end_turn
            own = [c if t >= seg.first_turn else 0.0 for t, c in enumerate(info["turn_credit"][:end])]
            info["turn_credit"] = own[offset:] + [0.0] * (seg.closing is not None)
        part = trajectory.model_copy(update={"messages": segment_messages(trajectory, seg), "info": info})
        row = expander.expand(part, reward=reward)
        earlier = (row.turn_ids >= 0) & (row.turn_ids < seg.first_turn - offset)
        if earlier.any():
            loss = row.loss_mask.copy()
            scores = row.token_level_scores.copy()
            loss[earlier] = 0
            scores[earlier] = 0.0  # an earlier turn's reward is on the row of its own segment
            row = dataclasses.replace(row, loss_mask=loss, token_level_scores=scores)
        rows.append(dataclasses.replace(row, trajectory_id=segment_row_id(trajectory.id, seg.index)))
    return rows


def sampled_segments(
    expander: Expander, trajectory: Trajectory, *, reward: float | None = None
) -> list[tuple[ContextSegment, TokenizedTrajectory]]:
    """The segments that are trained, with their rows: every segment that sampled a token. A segment
    that sampled nothing (the loop rewrote the context, then stopped at ``max_len``) has no row; the
    others keep their index (``ContextSegment.index``, the row id's ``#k``). The one rule of the native
    batch (``build_batch``) and of the adapters' episodes (``expand_episode``)."""
    pairs = zip(segments(trajectory), expand_segments(expander, trajectory, reward=reward), strict=True)
    return [(seg, row) for seg, row in pairs if row.loss_mask.any()]
