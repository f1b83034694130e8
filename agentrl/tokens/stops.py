"""The ids that end a sampled turn: the chat template's end-of-turn ∪ the model's EOS ids.

A model stops a turn by writing what its template writes after an assistant message
(``<|im_end|>``, ``<|eot_id|>``, ``<end_of_turn>``, ``</s>``), which need not be the tokenizer's
EOS: base Qwen's EOS is ``<|endoftext|>`` while its turns end with ``<|im_end|>``. Sampling that
stops only on EOS never stops such a model. This module is the one place that decides: the
trainer's rollout engines and the ``hf:`` rollout policy call ``turn_stop_ids`` and hand the set to
the expander, and an expander given no stop ids takes ``template_stop_ids`` of its own template
from the self-test, so what ends a turn while sampling is what the expander treats as the turn's end.

The end-of-turn id is read from renders: an assistant message with a marker content, alone and
after a user (and system) message (templates differ in which they accept), the ids right after the
content; whitespace before it is skipped, and only a special or added token counts (a template whose
turns end with plain text has no end-of-turn id). A template that writes nothing after an
assistant message (the next role header doubles as the stop) gives the first special id of each
header that can follow the turn: the next user message's, and a tool result's (GLM ends a turn that
calls a tool with ``<|observation|>``, one that answers with ``<|user|>``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentrl.errors import TemplateError
from agentrl.tokens.template import ASSISTANT_MARKER, ChatTemplate, call_id

__all__ = ["end_of_turn_ids", "generation_eos_ids", "template_stop_ids", "turn_stop_ids"]

_USER = {"role": "user", "content": "USER_STOP_q8"}
_SYSTEM = {"role": "system", "content": "SYSTEM_STOP_q8"}
_ASSISTANT = {"role": "assistant", "content": ASSISTANT_MARKER}


def _special_ids(tokenizer: Any) -> set[int]:
    ids = {int(i) for i in tokenizer.get_added_vocab().values()}
    ids |= {int(i) for i in getattr(tokenizer, "all_special_ids", []) or []}
    return ids


def _first_special(template: ChatTemplate, text: str, special: set[int]) -> int | None:
    """The first id of ``text`` when it is special, after any whitespace-only tokens; else None."""
    for i in template.encode(text):
        if i in special:
            return i
        if template.decode([i]).strip():
            return None
    return None


def _follower_header(
    template: ChatTemplate, head: list[dict[str, Any]], role: str, special: set[int]
) -> int | None:
    """The first special id that a ``role`` message writes after an assistant turn the template ends
    with nothing; None where no such conversation renders (a tool result after a plain turn, then
    after a turn that calls a tool, in the id style the template accepts)."""
    follower: dict[str, Any] = {"role": role, "content": "FOLLOW_STOP_q8"}
    turns = [_ASSISTANT]
    if role == "tool":
        cid = call_id("call_1", template.call_ids)
        follower["tool_call_id"] = cid
        turns.append(
            {
                **_ASSISTANT,
                "tool_calls": [
                    {"id": cid, "type": "function", "function": {"name": "search", "arguments": {}}}
                ],
            }
        )
    for turn in turns:
        try:
            before = template.render([*head, turn])
            after = template.render([*head, turn, follower])
        except TemplateError:
            continue
        if after.startswith(before):
            return _first_special(template, after[len(before) :], special)
        if turn is _ASSISTANT:  # the turn is written otherwise once not last: read after its content
            j = after.rfind(ASSISTANT_MARKER)
            return _first_special(template, after[j + len(ASSISTANT_MARKER) :], special) if j >= 0 else None
    return None


def end_of_turn_ids(template: ChatTemplate) -> set[int]:
    """The ids the template writes right after an assistant message's content (module docstring);
    empty when no conversation renders one. ``TemplateError`` only if no probe renders at all."""
    special = _special_ids(template.tokenizer)
    found: set[int] = set()
    rendered = False
    for head in ([], [_USER], [_SYSTEM, _USER]):
        try:
            text = template.render([*head, _ASSISTANT])
        except TemplateError:
            continue
        rendered = True
        i = text.rfind(ASSISTANT_MARKER)
        if i < 0:
            continue
        tail = text[i + len(ASSISTANT_MARKER) :]
        if tail.strip():
            stops = {_first_special(template, tail, special)}
        else:  # nothing after the turn: the header of what follows is the stop
            stops = {_follower_header(template, head, role, special) for role in ("user", "tool")}
        found |= {s for s in stops if s is not None}
    if not rendered:
        raise TemplateError("the chat template renders no conversation that ends with an assistant message")
    return found


def generation_eos_ids(generation_config: Any) -> set[int]:
    """``generation_config.eos_token_id`` as a set (it may be None, an int or a list of ints)."""
    eos = getattr(generation_config, "eos_token_id", None) if generation_config is not None else None
    if eos is None:
        return set()
    return {int(eos)} if isinstance(eos, int) else {int(i) for i in eos}


def template_stop_ids(
    template: ChatTemplate, generation_config: Any = None, extra: Iterable[int] = ()
) -> frozenset[int]:
    """``template``'s end-of-turn ids ∪ ``generation_config.eos_token_id`` ∪ the tokenizer's EOS
    (∪ ``extra``), ids outside the tokenizer's vocabulary dropped; may be empty. The expander's
    self-test calls it on its own template, ``turn_stop_ids`` on a tokenizer's."""
    tokenizer = template.tokenizer
    stops = end_of_turn_ids(template) | generation_eos_ids(generation_config) | {int(i) for i in extra}
    if isinstance(tokenizer.eos_token_id, int):
        stops.add(tokenizer.eos_token_id)
    vocab = len(tokenizer)
    return frozenset(i for i in stops if 0 <= i < vocab)


def turn_stop_ids(
    tokenizer: Any,
    *,
    chat_template: str | None = None,
    generation_config: Any = None,
    extra: Iterable[int] = (),
    **template_kwargs: Any,
) -> frozenset[int]:
    """``template_stop_ids`` of the tokenizer's chat template (or ``chat_template``), rendered with
    ``template_kwargs``. ``TemplateError`` when the set is empty: sampling could never end a turn
    but by length."""
    template = ChatTemplate(tokenizer, chat_template, **template_kwargs)
    stops = template_stop_ids(template, generation_config, extra)
    if not stops:
        raise TemplateError(
            "no stop token: the chat template ends assistant turns with no special token, and neither "
            "the tokenizer nor the generation config has an EOS id"
        )
    return stops
