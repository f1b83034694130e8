"""The agent's tools as one table: each tool's name, its role, the argument that carries it, and its
schema.

Every reader that must agree on what a tool is reads ``TOOLS``: the env (which tools exist, their
schemas and argument checks, which call ends the episode, which backend a call runs on), the
parser (the Search-R1 tags and the argument a tag's body fills), the judge's evidence graders and
the official-source counts (which calls open a page, and the argument naming it), the evaluation's
research shares (which calls search, with which query) and a trajectory's report (which call
answers). A tool's role says what its calls are:

- ``search``: search results for a query (``arg``: the query);
- ``page``: a page of text at a URL (``arg``: the URL): the sources an answer may cite;
- ``answer``: the final report (``arg``: the report), which ends the episode.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

__all__ = ["ANSWER", "PAGE", "SEARCH", "TOOLS", "ToolSpec", "tool_arg", "tools_with_role"]

Role = Literal["search", "page", "answer"]


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its ``name``, ``role``, the argument ``arg`` that carries what the role needs (the
    one a Search-R1 tag's body fills), and its JSON-schema ``parameters`` with a ``description``."""

    name: str
    role: Role
    arg: str
    description: str
    parameters: Mapping[str, Any] = field(default_factory=dict)

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-calling schema (also shown in the Hermes system prompt)."""
        params = {"type": "object", "properties": dict(self.parameters), "required": [self.arg]}
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": params},
        }


SEARCH = ToolSpec(
    "search",
    "search",
    "query",
    "Search the web. Returns titles, URLs, dates and snippets.",
    {
        "query": {"type": "string", "description": "what to look for"},
        "k": {"type": "integer", "description": "number of results (1-20)", "default": 5},
    },
)
PAGE = ToolSpec(
    "open_url",
    "page",
    "url",
    "Read a web page as text, one page of text at a time.",
    {
        "url": {"type": "string", "description": "the URL to open"},
        "page": {"type": "integer", "description": "which page of the text (1 = first)", "default": 1},
    },
)
ANSWER = ToolSpec(
    "answer",
    "answer",
    "report",
    "Give the final report and end the episode.",
    {"report": {"type": "string", "description": "the final report, citing sources as \\cite{...}"}},
)

#: The tools, by name, in the order the system prompt lists them.
TOOLS: Mapping[str, ToolSpec] = MappingProxyType({t.name: t for t in (SEARCH, PAGE, ANSWER)})


@functools.cache  # the table is read-only: each role's answer is fixed, and loops over tool logs ask it
def tools_with_role(role: Role) -> tuple[str, ...]:
    """The names of the tools whose calls play ``role`` (a tuple: membership of an unhashable value,
    such as a hand-written tool log's ``"tool": [...]``, is False, not a ``TypeError``)."""
    return tuple(name for name, t in TOOLS.items() if t.role == role)


def tool_arg(name: str, role: Role, arguments: Any) -> str | None:
    """The string argument a call of tool ``name`` carries for ``role`` (a search's query, a page's
    URL, an answer's report); None when the tool does not play that role or the argument is not a
    string."""
    spec = TOOLS.get(name)
    if spec is None or spec.role != role or not isinstance(arguments, dict):
        return None
    value = arguments.get(spec.arg)
    return value if isinstance(value, str) else None
