"""Reading the judge's reply: a JSON object ``{"criteria": [{"id", "reasoning", "verdict"}]}``.

Models wrap JSON in prose, ``<think>`` blocks and code fences, and write verdicts in any case.
``parse_reply`` strips reasoning blocks and reads every top-level JSON object in the text that
gives verdicts; verdicts are matched case- and punctuation-insensitively against the three
enumerated verdicts. Each asked-for criterion must get exactly one verdict in the whole reply:
a second one (a quoted example after the answer, a "revised" object, the same id twice in the
list) is ambiguous, so that criterion is a problem, never decided by which came first or last.
It never raises: what it cannot read becomes a problem in the result, and the caller retries.
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
    answers = [e for e in map(_criteria_list, _json_objects(text)) if e is not None]
    if not answers:
        result.problems.append("no JSON object with 'criteria' in the reply")
        return result
    wanted = set(expected)
    found: dict[str, list[tuple[str | None, str, Any]]] = {}
    for entries in answers:
        for entry in entries:
            entry = _lower_keys(entry)
            if not isinstance(entry, dict):
                continue
            cid = entry.get("id", entry.get("criterion", entry.get("criterion_id")))
            if not isinstance(cid, str | int) or str(cid).strip() not in wanted:
                continue
            reasoning = entry.get("reasoning", entry.get("explanation", ""))
            reasoning = reasoning if isinstance(reasoning, str) else json.dumps(reasoning, default=str)
            raw = entry.get("verdict")
            found.setdefault(str(cid).strip(), []).append((normalize_verdict(raw), reasoning, raw))
    for cid in expected:
        got = found.get(cid, [])
        if not got:
            result.problems.append(f"criterion {cid!r}: missing from the reply")
        elif len(got) > 1:
            said = ", ".join(repr(v or raw)[:40] for v, _, raw in got)
            result.problems.append(
                f"criterion {cid!r}: {len(got)} verdicts in the reply ({said}); expected one"
            )
        elif got[0][0] is None:
            result.problems.append(f"criterion {cid!r}: unknown verdict {repr(got[0][2])[:80]}")
        else:
            result.verdicts[cid] = (got[0][0], got[0][1])
    return result
