"""Reading the judge's reply: a JSON object ``{"criteria": [{"id", "reasoning", "verdict"}]}``.

Models wrap JSON in prose, ``<think>`` blocks and code fences, and write verdicts in any case.
``parse_reply`` strips reasoning blocks, collects every top-level JSON object in the text and
takes the last one that carries criteria; verdicts are matched case- and punctuation-insensitively
against the three enumerated verdicts. It never raises: what it cannot read becomes a problem in
the result, and the caller retries.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from agentrl.trajectory import VERDICTS

__all__ = ["ParsedReply", "normalize_verdict", "parse_reply"]

_THINK = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.S | re.I)
_CLOSE_THINK = re.compile(r"</(think|thinking|reasoning)>", re.I)
_MAX_CHARS = 200_000
_MAX_ATTEMPTS = 4_000
_VERDICT_KEYS = {re.sub(r"[^a-z]", "", v.lower()): v for v in VERDICTS}


@dataclass
class ParsedReply:
    """What a reply said: ``verdicts[id] = (verdict, reasoning)`` and the ``problems`` found."""

    verdicts: dict[str, tuple[str, str]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every expected criterion got a known verdict."""
        return not self.problems


def normalize_verdict(value: Any) -> str | None:
    """``'fully satisfied'``, ``'FULLY_SATISFIED'``, ``'Fully-Satisfied.'`` → ``'Fully Satisfied'``; else None."""
    if not isinstance(value, str):
        return None
    return _VERDICT_KEYS.get(re.sub(r"[^a-z]", "", value.lower()))


def _json_objects(text: str) -> list[Any]:
    """Every top-level JSON object in ``text``, left to right (nested ones are part of their parent)."""
    decoder = json.JSONDecoder()
    found: list[Any] = []
    i, attempts = 0, 0
    while attempts < _MAX_ATTEMPTS:
        i = text.find("{", i)
        if i < 0:
            break
        attempts += 1
        try:
            obj, end = decoder.raw_decode(text, i)
        except (ValueError, RecursionError):
            i += 1
            continue
        found.append(obj)
        i = end
    return found


def _lower_keys(obj: Any) -> Any:
    return {str(k).strip().lower(): v for k, v in obj.items()} if isinstance(obj, dict) else obj


def _criteria_list(obj: Any) -> list[Any] | None:
    """The list of per-criterion entries an object carries, or None when it carries none."""
    obj = _lower_keys(obj)
    if not isinstance(obj, dict):
        return None
    crit = obj.get("criteria")
    if isinstance(crit, list):
        return crit
    if isinstance(crit, dict):  # {"criteria": {"accuracy": {"verdict": ...}}}
        return [{"id": k, **(v if isinstance(v, dict) else {"verdict": v})} for k, v in crit.items()]
    if "id" in obj and "verdict" in obj:  # a single criterion on its own
        return [obj]
    return None


def parse_reply(text: Any, expected: list[str] | tuple[str, ...]) -> ParsedReply:
    """Read the verdicts for the criterion ids in ``expected`` from a judge reply.

    Returns a ``ParsedReply`` whose ``problems`` list missing criteria, unknown verdicts and
    unreadable replies; ids not in ``expected`` are ignored. Never raises.
    """
    result = ParsedReply()
    if not isinstance(text, str):
        result.problems.append("the reply has no text")
        return result
    text = _THINK.sub(" ", text[-_MAX_CHARS:])
    closes = list(_CLOSE_THINK.finditer(text))
    if closes:  # an unclosed-at-start think block: keep what follows the last closing tag
        text = text[closes[-1].end() :]
    entries: list[Any] | None = None
    for obj in reversed(_json_objects(text)):
        entries = _criteria_list(obj)
        if entries is not None:
            break
    if entries is None:
        result.problems.append("no JSON object with 'criteria' in the reply")
        return result
    wanted = set(expected)
    unknown: dict[str, str] = {}
    for entry in entries:
        entry = _lower_keys(entry)
        if not isinstance(entry, dict):
            continue
        cid = entry.get("id", entry.get("criterion", entry.get("criterion_id")))
        if not isinstance(cid, str | int) or str(cid).strip() not in wanted:
            continue
        cid = str(cid).strip()
        verdict = normalize_verdict(entry.get("verdict"))
        reasoning = entry.get("reasoning", entry.get("explanation", ""))
        reasoning = reasoning if isinstance(reasoning, str) else json.dumps(reasoning, default=str)
        if verdict is None:
            unknown.setdefault(cid, repr(entry.get("verdict"))[:80])
        else:
            result.verdicts.setdefault(cid, (verdict, reasoning))
    for cid in expected:
        if cid in result.verdicts:
            continue
        if cid in unknown:
            result.problems.append(f"criterion {cid!r}: unknown verdict {unknown[cid]}")
        else:
            result.problems.append(f"criterion {cid!r}: missing from the reply")
    return result
