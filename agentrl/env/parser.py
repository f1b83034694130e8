"""Parse an assistant turn into tool calls, in every format a policy may use.

Three formats are accepted on every turn, whatever the system prompt asked for:

- OpenAI ``tool_calls`` on a message (arguments as a JSON string);
- Hermes/Qwen text: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, several per turn;
- Search-R1 tags: ``<search>query</search>``, ``<answer>report</answer>`` (and ``<open_url>url</open_url>``).

The parser never raises: a call it cannot read becomes a ``ParseError`` that the env turns into an
error observation telling the model the right format.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from agentrl.trajectory import Message

__all__ = ["ParseError", "ParsedCall", "ParsedTurn", "parse_turn"]

_HERMES = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.S)
_R1 = re.compile(r"<(search|answer|open_url)>(.*?)</\1>", re.S)
_R1_OPEN = re.compile(r"<(search|answer|open_url)>", re.S)
_THINK = re.compile(r"<think>.*?</think>", re.S)


@dataclass
class ParsedCall:
    """One tool call as read from the turn: its name, decoded arguments and call id."""

    name: str
    arguments: dict[str, Any]
    id: str
    raw: str = ""


@dataclass
class ParseError:
    """A tool call that could not be read; ``message`` says what was wrong."""

    message: str
    raw: str = ""


@dataclass
class ParsedTurn:
    """The calls and errors found in one assistant turn, and the format they came in."""

    calls: list[ParsedCall] = field(default_factory=list)
    errors: list[ParseError] = field(default_factory=list)
    format: str = "none"


def _call_from_obj(obj: Any, raw: str, call_id: str) -> ParsedCall | ParseError:
    if not isinstance(obj, dict):
        return ParseError(f"a tool call must be a JSON object, got {type(obj).__name__}", raw)
    if "function" in obj and isinstance(obj["function"], dict):  # an OpenAI-shaped object inside the tag
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return ParseError('a tool call needs a "name" string', raw)
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except (ValueError, RecursionError) as e:  # RecursionError: JSON nested too deeply
            return ParseError(f'the "arguments" of {name!r} are not valid JSON: {e}', raw)
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return ParseError(f'the "arguments" of {name!r} must be a JSON object', raw)
    return ParsedCall(name=name.strip(), arguments=args, id=call_id, raw=raw)


def _parse_openai(message: Message) -> ParsedTurn:
    turn = ParsedTurn(format="openai")
    for i, call in enumerate(message.tool_calls or []):
        raw = call.function.arguments
        try:
            args = call.function.parsed_arguments()
        except (ValueError, RecursionError) as e:  # RecursionError: JSON nested too deeply
            turn.errors.append(
                ParseError(f"the arguments of {call.function.name!r} are not valid JSON: {e}", raw)
            )
            continue
        obj = {"name": call.function.name, "arguments": args}
        got = _call_from_obj(obj, raw, call.id or f"call_{i}")
        (turn.calls if isinstance(got, ParsedCall) else turn.errors).append(got)  # type: ignore[arg-type]
    return turn


def parse_turn(action: str | Message | dict[str, Any], *, turn_index: int = 0) -> ParsedTurn:
    """Read the tool calls of one assistant turn.

    ``action`` is the turn's text, a ``Message`` or a message dict. OpenAI ``tool_calls`` win when
    present; otherwise the text is scanned for Hermes tags, then Search-R1 tags. Text inside
    ``<think>...</think>`` is ignored. A turn with no call at all gives an empty ``ParsedTurn``.
    """
    if isinstance(action, dict):
        try:
            action = Message.model_validate({"role": "assistant", **action})
        except ValidationError as e:  # a malformed message dict is the policy's fault, not ours
            err = e.errors(include_url=False)[0]
            where = ".".join(str(p) for p in err["loc"]) or "message"
            return ParsedTurn(
                errors=[ParseError(f"the action is not a valid assistant message: {where}: {err['msg']}")]
            )
        except Exception as e:
            return ParsedTurn(errors=[ParseError(f"the action is not a valid assistant message: {e}")])
    if isinstance(action, Message):
        if action.tool_calls:
            return _parse_openai(action)
        text = action.text
    else:
        text = action if isinstance(action, str) else str(action)
    text = _THINK.sub("", text)
    prefix = f"call_{turn_index}_"

    if "<tool_call>" in text:
        turn = ParsedTurn(format="hermes")
        for i, m in enumerate(_HERMES.finditer(text)):
            raw = m.group(1).strip()
            try:
                obj = json.loads(raw)
            except (ValueError, RecursionError) as e:  # RecursionError: JSON nested too deeply
                turn.errors.append(
                    ParseError(f"the text inside <tool_call> is not valid JSON: {e}", raw[:200])
                )
                continue
            got = _call_from_obj(obj, raw[:200], f"{prefix}{i}")
            (turn.calls if isinstance(got, ParsedCall) else turn.errors).append(got)  # type: ignore[arg-type]
        return turn

    matches = list(_R1.finditer(text))
    if matches:
        turn = ParsedTurn(format="search_r1")
        for i, m in enumerate(matches):
            tag, body = m.group(1), m.group(2).strip()
            key = {"search": "query", "answer": "report", "open_url": "url"}[tag]
            turn.calls.append(
                ParsedCall(name=tag, arguments={key: body}, id=f"{prefix}{i}", raw=m.group(0)[:200])
            )
        return turn
    opened = _R1_OPEN.search(text)
    if opened:
        tag = opened.group(1)
        return ParsedTurn(format="search_r1", errors=[ParseError(f"<{tag}> is never closed with </{tag}>")])
    return ParsedTurn()
