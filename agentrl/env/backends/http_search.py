"""``search`` over HTTP: SearXNG's JSON API or a Search-R1-style ``POST /retrieve`` server.

SearXNG: ``GET {url}?q=...&format=json`` → ``{"results": [{"url", "title", "content", "publishedDate"}]}``.
Search-R1: ``POST {url}`` with ``{"queries": [q], "topk": k, "return_scores": true}`` →
``{"result": [[{"document": {"id", "contents"}, "score"}]]}`` where ``contents`` is the title in
quotes, a newline, then the text. Bounded retries with backoff on transport errors and 5xx.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import httpx

from agentrl.env.backends.base import Hit, ToolFailure
from agentrl.env.config import SearchConfig

__all__ = ["HttpSearch"]


class HttpSearch:
    """The http search backend (``api: searxng | retrieve``). Thread-safe."""

    def __init__(self, config: SearchConfig):
        self.config = config
        # Redirects are not followed: credentials in search.url would otherwise go along.
        self._client = httpx.Client(
            timeout=httpx.Timeout(config.timeout_s), trust_env=False, follow_redirects=False
        )
        if not config.allow_private:  # the service's own address is checked once, like any fetch
            from agentrl.env.backends.ssrf import checked_target, system_resolver

            try:
                checked_target(config.url or "", system_resolver, allow_private=False)
            except ToolFailure as e:
                from agentrl.errors import ConfigError

                raise ConfigError(f"search.url: {e}") from None

    def _request(self, query: str, k: int) -> httpx.Response:
        url = self.config.url or ""
        if self.config.api == "searxng":
            return self._client.get(url, params={"q": query, "format": "json"})
        return self._client.post(url, json={"queries": [query], "topk": k, "return_scores": True})

    def search(
        self, query: str, k: int, *, before: dt.date | None = None, world: str | None = None
    ) -> list[Hit]:
        """Top ``k`` results (``before`` and ``world`` are not supported by these APIs and are ignored)."""
        del before, world
        last = ""
        for attempt in range(self.config.retries + 1):
            try:
                resp = self._request(query, k)
                if resp.status_code < 500:
                    break
                last = f"HTTP {resp.status_code}"
            except httpx.TransportError as e:
                last = f"{type(e).__name__}: {e}"
            if attempt < self.config.retries:
                time.sleep(min(2.0, 0.2 * 2**attempt))
        else:
            raise ToolFailure(f"search service unavailable ({last})")
        if 300 <= resp.status_code < 400:
            raise ToolFailure(
                f"search service answered HTTP {resp.status_code} (a redirect, not followed: "
                "set search.url to the final address)"
            )
        if resp.status_code >= 400:
            raise ToolFailure(f"search service answered HTTP {resp.status_code}")
        try:
            data = resp.json()
        except ValueError:
            raise ToolFailure("search service returned invalid JSON") from None
        hits = _searxng(data) if self.config.api == "searxng" else _retrieve(data)
        return hits[:k]

    def close(self) -> None:
        """Close the HTTP client."""
        self._client.close()


def _searxng(data: Any) -> list[Hit]:
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list):
        raise ToolFailure("search service returned no 'results' list")
    hits = []
    for r in results:
        if isinstance(r, dict) and isinstance(r.get("url"), str):
            date = r.get("publishedDate")
            hits.append(
                Hit(
                    url=r["url"],
                    title=str(r.get("title") or r["url"]),
                    snippet=str(r.get("content") or ""),
                    date=str(date)[:10] if date else None,
                )
            )
    return hits


def _retrieve(data: Any) -> list[Hit]:
    result = data.get("result") if isinstance(data, dict) else None
    if not isinstance(result, list) or not result or not isinstance(result[0], list):
        raise ToolFailure("retrieval service returned no 'result' list")
    hits = []
    for i, item in enumerate(result[0]):
        doc = item.get("document", item) if isinstance(item, dict) else None
        if not isinstance(doc, dict):
            continue
        contents = str(doc.get("contents") or doc.get("text") or "")
        title, _, text = contents.partition("\n")
        title = title.strip().strip('"') or f"document {i + 1}"
        doc_id = doc.get("id", i)
        hits.append(
            Hit(url=str(doc.get("url") or f"retrieve://{doc_id}"), title=title, snippet=text.strip()[:500])
        )
    return hits
