"""The agent's tools: their schemas, the system prompt that teaches a tool format, argument checks,
and the text each tool returns."""

from __future__ import annotations

import json
import math
from typing import Any

from agentrl.env.backends.base import Hit, Page, ToolFailure
from agentrl.trajectory.outcome import answer_report
from agentrl.trajectory.tools import TOOLS

__all__ = [
    "TOOL_NAMES",
    "TOOL_SCHEMAS",
    "ArgError",
    "check_args",
    "format_help",
    "render_page",
    "render_search",
    "system_prompt",
]

#: The tools' names and their OpenAI function-calling schemas (also shown in the Hermes system prompt),
#: read off the one table (``agentrl.trajectory.tools.TOOLS``).
TOOL_NAMES = tuple(TOOLS)
TOOL_SCHEMAS: list[dict[str, Any]] = [t.schema() for t in TOOLS.values()]

_INTRO = (
    "You are a careful research agent. Today is {date}. Documents dated after today do not exist "
    "yet, and a period that has not ended, or whose results are not published, has no reported "
    "figures: say so and give the latest reported period instead. Prefer official sources over news, "
    "predictions and rumours, label every figure with its period, and cite each source you rely on "
    "as \\cite{{source}} where source is its URL or id."
)

_FORMATS = {
    "hermes": (
        "You can call these tools:\n<tools>\n{tools}\n</tools>\n\n"
        "To call a tool, write a JSON object with its name and arguments between tags, one call per tag "
        "(several tags per turn are allowed):\n"
        '<tool_call>\n{{"name": "search", "arguments": {{"query": "..."}}}}\n</tool_call>\n'
        "When you are done, call the answer tool with your final report."
    ),
    "search_r1": (
        "To search, write <search>your query</search>. To read a page, write <open_url>URL</open_url>. "
        "Results come back between <information> and </information>. When you are done, write the "
        "final report between <answer> and </answer>."
    ),
    "openai": "Use the search, open_url and answer tools through function calling; answer gives the final report.",
}


class ArgError(ValueError):
    """A tool call's arguments are wrong; the message tells the model what was expected."""


def system_prompt(tool_format: str, date: str, template: str | None = None) -> str:
    """The system prompt for a task dated ``date`` in the given tool format."""
    tools = "\n".join(json.dumps(s["function"], ensure_ascii=False) for s in TOOL_SCHEMAS)
    if template is not None:
        return template.replace("{date}", date).replace("{tools}", tools)
    fmt = _FORMATS["hermes" if tool_format == "auto" else tool_format]
    return _INTRO.format(date=date) + "\n\n" + fmt.format(tools=tools)


def format_help(tool_format: str) -> str:
    """One line reminding the model of the right call format (sent with every error observation)."""
    if tool_format == "search_r1":
        return "Use <search>query</search>, <open_url>URL</open_url> or <answer>report</answer>."
    return (
        'Call a tool as <tool_call>{"name": "search", "arguments": {"query": "..."}}</tool_call>; '
        "tools: search(query, k=5), open_url(url, page=1), answer(report)."
    )


def _int(args: dict[str, Any], name: str, default: int, lo: int, hi: int) -> int:
    v = args.get(name, default)
    if isinstance(v, bool):
        raise ArgError(f"{name} must be an integer")
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        v = int(v.strip())
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if not isinstance(v, int):
        raise ArgError(f"{name} must be an integer, got {json.dumps(v)[:40]}")
    if not lo <= v <= hi:
        raise ArgError(f"{name} must be between {lo} and {hi}, got {v}")
    return v


def _str(args: dict[str, Any], name: str, max_len: int) -> str:
    v = args.get(name)
    if not isinstance(v, str) or not v.strip():
        raise ArgError(f'"{name}" is required and must be a non-empty string')
    if len(v) > max_len:
        raise ArgError(f'"{name}" is too long ({len(v)} characters, at most {max_len})')
    return v.strip()


def check_args(name: str, args: dict[str, Any], default_k: int) -> dict[str, Any]:
    """Validated, normalised arguments of a call; ``ArgError`` names the bad argument."""
    spec = TOOLS[name]
    allowed = set(spec.parameters)
    extra = sorted(set(args) - allowed)
    if extra:
        raise ArgError(
            f"unknown argument(s) {', '.join(extra)} for {name}; expected {', '.join(sorted(allowed))}"
        )
    if spec.role == "search":
        return {spec.arg: _str(args, spec.arg, 1000), "k": _int(args, "k", default_k, 1, 20)}
    if spec.role == "page":
        return {spec.arg: _str(args, spec.arg, 4000), "page": _int(args, "page", 1, 1, 100_000)}
    report = answer_report(args)  # the rule Trajectory.final_report() applies too
    if report is None:
        raise ArgError('"report" is required and must be a string')
    return {"report": report}


def render_search(query: str, hits: list[Hit]) -> str:
    """Search results as the model sees them."""
    if not hits:
        return f'No results for "{query}".'
    lines = [f'Results for "{query}":']
    for i, h in enumerate(hits, start=1):
        date = f" ({h.date})" if h.date else ""
        lines.append(f"{i}. {h.title}{date}\n   {h.url}\n   {h.snippet}")
    return "\n".join(lines)


def render_page(page: Page, number: int, page_chars: int) -> str:
    """One page of a document's text, with a header saying where it is and how to read on."""
    text = page.text or ""
    pages = max(1, math.ceil(len(text) / page_chars))
    if number > pages:
        raise ToolFailure(f"page {number} is out of range: {page.url} has {pages} page(s)")
    chunk = text[(number - 1) * page_chars : number * page_chars]
    head = f"Title: {page.title}\nURL: {page.url}\n" + (f"Date: {page.date}\n" if page.date else "")
    more = (
        f"\n\n[page {number} of {pages}; open_url with page={number + 1} for more]" if number < pages else ""
    )
    return f"{head}Page {number} of {pages}\n\n{chunk}{more}"
