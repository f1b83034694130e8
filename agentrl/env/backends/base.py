"""What a search or fetch backend returns, and the failure the policy sees as an error observation."""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass
from typing import Any, Protocol

__all__ = ["FetchBackend", "Hit", "Page", "SearchBackend", "ToolFailure"]


class ToolFailure(Exception):
    """A tool call failed in a way the policy should see (404, blocked URL, timeout, replay miss).

    It is not an ``AgentRLError``: the env turns it into an error observation and the episode goes on.
    """


@dataclass
class Hit:
    """One search result."""

    url: str
    title: str
    snippet: str = ""
    date: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (for the record/replay cache)."""
        return asdict(self)


@dataclass
class Page:
    """A fetched document as text."""

    url: str
    title: str
    text: str
    date: str | None = None
    content_type: str = "text/html"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (for the record/replay cache)."""
        return asdict(self)


class SearchBackend(Protocol):
    """Anything that answers ``search``; ``before`` hides documents dated after it (the clock). The
    env passes ``world=`` only for a task that names one (a sandbox built with ``worlds``): then
    only that world's documents exist."""

    def search(self, query: str, k: int, *, before: dt.date | None = None) -> list[Hit]: ...


class FetchBackend(Protocol):
    """Anything that answers ``open_url``; raises ``ToolFailure`` for a page it cannot give (and,
    given ``world=``, for a page of another world)."""

    def fetch(self, url: str, *, before: dt.date | None = None) -> Page: ...
