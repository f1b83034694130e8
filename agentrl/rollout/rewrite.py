"""The episode loop's context rewrite (``agentrl.rollout.context`` has the strategies,
``agentrl.trajectory.context`` the view and the records): ``rewrite_context``.

Called before a turn whose prompt would pass the trigger. ``drop_observations`` stubs the older
tool results. ``summarize`` asks the policy for its notes (``SUMMARY_REQUEST`` after the last tool
result; the request goes through the episode's generate function with ``Request.summary`` set and
its own seed, so a lock-step batch samples it beside the other episodes' turns), then restarts the
context from the task with the notes and the last ``keep_last_turns`` turns. Either appends its
record to ``rewrites`` (``info["context_segments"]``) and returns the new view; the view unchanged
means nothing could be rewritten (the loop's ``max_len`` rule then decides). A summary that would
remove no turn (``keep_last_turns`` covers every turn shown) is not asked for: the older tool
results are stubbed instead, where there are any.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from agentrl.policy.server_reply import PROMPT_IDS
from agentrl.rollout.turns import GenerateFn, Limits, Request, Stop, turn_finish
from agentrl.seeds import stable_seed
from agentrl.tokens import Expander, sampled_message
from agentrl.trajectory import Message
from agentrl.trajectory.context import SUMMARY_REQUEST, ContextView, keep_from, stub_indices, summarized_task

__all__ = ["rewrite_context"]


def _drop(
    ctx: ContextView, messages: list[Message], keep: int, turn: int, rewrites: list[dict[str, Any]]
) -> ContextView:
    """Stub the shown tool results older than the last ``keep`` turns (the view unchanged when
    there are none)."""
    more = {i for i in stub_indices(messages, keep) if i >= ctx.kept_from} - ctx.stubbed
    if not more:
        return ctx
    new = ContextView(ctx.stubbed | more, ctx.head, ctx.kept_from)
    rewrites.append(
        {
            "turn": turn,
            "messages": len(messages),
            "stubbed": sorted(new.stubbed),
            "strategy": "drop_observations",
        }
    )
    return new


async def rewrite_context(
    ctx: ContextView,
    env: Any,
    spec: Any,
    generate: GenerateFn,
    expander: Expander,
    stops: Collection[int],
    limits: Limits,
    turn: int,
    index: int,
    rewrites: list[dict[str, Any]],
    base: int = 0,
) -> ContextView | Stop:
    """The context for turn ``turn`` after a rewrite (see the module docstring); a ``Stop`` from the
    generate function asked for the summary ends the episode. ``base``: the length of the current
    segment's first prompt, from which ``limits.max_completion_tokens`` counts (the notes close that
    segment's row, so they share its budget)."""
    policy, messages = limits.context, list(env.messages)
    keep = policy.keep_last_turns
    shown_turns = [i for i, m in enumerate(messages) if m.role == "assistant" and i >= ctx.kept_from]
    if policy.strategy != "summarize" or not shown_turns or keep_from(messages, keep) <= shown_turns[0]:
        return _drop(ctx, messages, keep, turn, rewrites)  # (a summary would remove no turn)
    request = Message(role="user", content=SUMMARY_REQUEST)
    budget = limits.max_new_tokens or 0

    def ask(view: ContextView) -> tuple[list[Message], list[int]]:
        shown = [*view.show(messages), request]
        return shown, expander.generation_prompt_ids(shown)

    shown, prompt = ask(ctx)
    if limits.max_len is not None and len(prompt) + budget > limits.max_len:
        dropped = _drop(ctx, messages, keep, turn, rewrites)  # the notes are written from what is left
        if dropped == ctx:
            return ctx
        ctx = dropped
        shown, prompt = ask(ctx)
        base = len(prompt)  # the notes are the new segment's only turn
        if len(prompt) + budget > limits.max_len:
            return ctx
    max_tokens = limits.max_new_tokens
    if limits.max_completion_tokens is not None:
        left = limits.max_completion_tokens - (len(prompt) - base)
        if left <= 0:
            return ctx
        max_tokens = left if max_tokens is None else min(max_tokens, left)
    seed = None if spec.seed is None else stable_seed(spec.seed, turn, "summary")
    out = await generate(Request(env, spec, index, turn, seed, shown, prompt, max_tokens, summary=True))
    if isinstance(out, Stop):
        return out
    if isinstance(out, Message):  # a chat-mode reply: its text is the notes
        note = out.model_copy(update={"tool_calls": None})
        if note.model_extra:
            note.model_extra.pop(PROMPT_IDS, None)  # the server's prompt is not part of the notes
    else:
        ids = [int(t) for t in out.token_ids]
        note = sampled_message(expander.tokenizer, ids, out.logprobs, turn_finish(ids, stops), stops)
    task = next(m for m in messages if m.role == "user").text
    new = ContextView(frozenset(), summarized_task(task, note.text), keep_from(messages, keep))
    rewrites.append(
        {"turn": turn, "messages": len(messages), "stubbed": [], "strategy": "summarize", "task": new.head,
         "kept_from": new.kept_from, "request": SUMMARY_REQUEST, "summary": note.model_dump(mode="json", exclude_none=True)}
    )  # fmt: skip
    return new
