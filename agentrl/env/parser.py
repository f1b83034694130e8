"""Parse an assistant turn into tool calls, in every format a policy may use.

The parser recognises the tool-call formats of the common open model families (``format`` names):

- ``openai``: OpenAI ``tool_calls`` on a message (arguments as a JSON string);
- ``hermes``: Hermes/Qwen text ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, several per turn;
- ``search_r1``: Search-R1 tags ``<search>query</search>``, ``<answer>report</answer>``, ``<open_url>url</open_url>``;
- ``llama3_json``: Llama-3's bare JSON turn ``{"name": ..., "parameters": {...}}`` (or a list of them);
- ``python_tag``: Llama-3.1's ``<|python_tag|>`` followed by such JSON or ``name.call(key="value")``;
- ``mistral``: ``[TOOL_CALLS] [{"name": ..., "arguments": {...}}]`` or ``[TOOL_CALLS]name[ARGS]{...}``;
- ``json_block``: a fenced ```` ```json ```` block holding such a call object.

``NATIVE_FORMATS`` (the first three) are run on every turn, whatever the system prompt asked for;
the env runs the others (``FOREIGN_FORMATS``) only with ``tool_format: auto`` and otherwise answers
them with a format error. Either way a turn in any of these formats is a tool call, never a
final answer. The parser never raises: a call it cannot read becomes a ``ParseError`` that the env
turns into an error observation telling the model the right format.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from agentrl.trajectory import Message
from agentrl.trajectory.tools import TOOLS

__all__ = ["FOREIGN_FORMATS", "NATIVE_FORMATS", "ParseError", "ParsedCall", "ParsedTurn", "parse_turn"]

#: Formats the env runs whatever its ``tool_format``.
NATIVE_FORMATS = ("openai", "hermes", "search_r1")
#: Other model families' formats, by name and as an error observation describes them; the env runs
#: them only with ``tool_format: auto``.
FOREIGN_FORMATS = {
    "llama3_json": 'a bare JSON object {"name": ..., "parameters": ...}',
    "python_tag": "<|python_tag|>",
    "mistral": "[TOOL_CALLS]",
    "json_block": "a fenced JSON block",
}

_HERMES = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.S)
_R1_TAGS = "|".join(map(re.escape, TOOLS))  # a Search-R1 tag per tool: <search>query</search>
_R1 = re.compile(rf"<({_R1_TAGS})>(.*?)</\1>", re.S)
_R1_OPEN = re.compile(rf"<({_R1_TAGS})>", re.S)
_THINK = re.compile(r"<think>.*?</think>", re.S)
# A JSON text that starts like a call object (or a list of them): ``{"name": ...`` / ``[{"name": ...``.
_CALL_START = re.compile(r'^\s*\[?\s*\{\s*"name"\s*:')
_CALL_INSIDE = re.compile(r'\{\s*"name"\s*:\s*"[^"]*"\s*,\s*"(?:parameters|arguments)"\s*:')
_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n(.*?)```", re.S)
_PYTHON_TAG = "<|python_tag|>"
_MISTRAL = "[TOOL_CALLS]"
_MISTRAL_V11 = re.compile(r"^([\w.-]+)\s*(?:\[CALL_ID\][^\[]*)?\[ARGS\](.*)$", re.S)
_LLAMA_END = re.compile(r"<\|(?:eom_id|eot_id)\|>.*$", re.S)


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


def _add(turn: ParsedTurn, obj: Any, raw: str, call_id: str) -> None:
    got = _call_from_obj(obj, raw[:200], call_id)
    (turn.calls if isinstance(got, ParsedCall) else turn.errors).append(got)  # type: ignore[arg-type]


def _json_calls(turn: ParsedTurn, text: str, prefix: str, what: str) -> None:
    """Add the call object (or list of call objects) that ``text`` starts with to ``turn``."""
    text = text.strip()
    try:
        obj, _ = json.JSONDecoder().raw_decode(text)
    except (ValueError, RecursionError) as e:  # RecursionError: JSON nested too deeply
        turn.errors.append(ParseError(f"the tool call in {what} is not valid JSON: {e}", text[:200]))
        return
    if obj == []:  # a marker, then no call at all: a format error, never a turn without calls (a report)
        turn.errors.append(ParseError(f"the list of tool calls in {what} is empty", text[:200]))
    for obj_i in obj if isinstance(obj, list) else [obj]:
        _add(turn, obj_i, text, f"{prefix}{len(turn.calls) + len(turn.errors)}")


def _python_call(turn: ParsedTurn, text: str, prefix: str) -> None:
    """Llama-3.1's built-in tool syntax after ``<|python_tag|>``: ``name.call(key="value", ...)``."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
        if not (isinstance(node, ast.Call) and not node.args and isinstance(node.func, ast.Attribute)):
            raise ValueError("expected name.call(key=value, ...)")
        name = ast.unparse(node.func.value)
        args = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg is not None}
    except Exception as e:  # ast raises SyntaxError, ValueError, TypeError, RecursionError, MemoryError
        turn.errors.append(ParseError(f"the call after <|python_tag|> cannot be read: {e}", text[:200]))
        return
    _add(turn, {"name": name, "arguments": args}, text, f"{prefix}{len(turn.calls) + len(turn.errors)}")


def _parse_foreign(text: str, prefix: str) -> ParsedTurn | None:
    """The calls of a turn written in another model family's format; None when there is none."""
    if _MISTRAL in text:
        turn = ParsedTurn(format="mistral")
        for chunk in text.split(_MISTRAL)[1:]:
            chunk = chunk.strip()
            m = _MISTRAL_V11.match(chunk)
            if m and not chunk.startswith(("[", "{")):  # the v11 form: name[ARGS]{arguments}
                call_id = f"{prefix}{len(turn.calls) + len(turn.errors)}"
                try:
                    args, _ = json.JSONDecoder().raw_decode(m.group(2).strip())
                except (ValueError, RecursionError) as e:
                    turn.errors.append(
                        ParseError(f"the arguments after [ARGS] are not valid JSON: {e}", chunk[:200])
                    )
                    continue
                _add(turn, {"name": m.group(1), "arguments": args}, chunk, call_id)
            else:
                _json_calls(turn, chunk, prefix, "[TOOL_CALLS]")
        return turn
    if _PYTHON_TAG in text:
        turn = ParsedTurn(format="python_tag")
        body = _LLAMA_END.sub("", text.split(_PYTHON_TAG, 1)[1]).strip()
        if body.startswith(("{", "[")):
            _json_calls(turn, body, prefix, "<|python_tag|>")
        else:
            _python_call(turn, body, prefix)
        return turn
    blocks = [b for b in _FENCE.findall(text) if _CALL_START.match(b)]
    if blocks:
        turn = ParsedTurn(format="json_block")
        for b in blocks:
            _json_calls(turn, b, prefix, "the JSON block")
        return turn
    if _CALL_START.match(text):
        turn = ParsedTurn(format="llama3_json")
        _json_calls(turn, text, prefix, "the JSON object")
        return turn
    embedded = list(_CALL_INSIDE.finditer(text))  # a call object after some prose
    if embedded:
        turn = ParsedTurn(format="llama3_json")
        for m in embedded:
            _json_calls(turn, text[m.start() :], prefix, "the JSON object")
        return turn
    return None


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
    present; otherwise the text is scanned for Hermes tags, then Search-R1 tags, then the other
    families' formats (``[TOOL_CALLS]``, ``<|python_tag|>``, a fenced JSON block, bare JSON). Text inside
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
            key = TOOLS[tag].arg
            turn.calls.append(
                ParsedCall(name=tag, arguments={key: body}, id=f"{prefix}{i}", raw=m.group(0)[:200])
            )
        return turn
    opened = _R1_OPEN.search(text)
    if opened:
        tag = opened.group(1)
        return ParsedTurn(format="search_r1", errors=[ParseError(f"<{tag}> is never closed with </{tag}>")])
    return _parse_foreign(text, prefix) or ParsedTurn()
