"""Tool backends: ``sandbox`` (local BM25 corpus), ``http`` search and fetch, and the record/replay
cache. ``make_backends`` builds them from an ``EnvConfig`` (shared per process where it matters)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

from agentrl.env.backends.base import FetchBackend, Hit, Page, SearchBackend, ToolFailure
from agentrl.errors import ConfigError

if TYPE_CHECKING:
    from agentrl.env.backends.cache import ToolCache
    from agentrl.env.config import EnvConfig
    from agentrl.env.suite import Suite

__all__ = ["FetchBackend", "Hit", "Page", "SearchBackend", "ToolFailure", "make_backends"]

_CACHES: dict[tuple[str, str], ToolCache] = {}
_LOCK = threading.Lock()


def _cache(path: str, mode: str) -> ToolCache:
    from agentrl.env.backends.cache import ToolCache

    key = (str(Path(path).resolve()), mode)
    with _LOCK:
        if key not in _CACHES:
            _CACHES[key] = ToolCache(path, mode)  # type: ignore[arg-type]
        return _CACHES[key]


def make_backends(
    config: EnvConfig, suite: Suite
) -> tuple[SearchBackend | None, FetchBackend | None, ToolCache | None]:
    """The search backend, fetch backend and cache an env with ``config`` uses.

    In replay mode the backends are None: every answer comes from the cache file.
    """
    cache = None
    if config.cache.mode != "off":
        if not config.cache.path:
            raise ConfigError(f"cache.path: required when cache.mode is {config.cache.mode!r}")
        cache = _cache(config.cache.path, config.cache.mode)
        if config.cache.mode == "replay":
            return None, None, cache
    search: SearchBackend | None = None
    fetch: FetchBackend | None = None
    if "sandbox" in (config.search.backend, config.fetch.backend):
        if suite.corpus_path is None:
            raise ConfigError(f"suite {suite.root}: the sandbox backend needs a corpus.jsonl")
        from agentrl.env.backends.sandbox import sandbox_backend

        sb = sandbox_backend(suite.corpus_path)
        search = sb if config.search.backend == "sandbox" else None
        fetch = sb if config.fetch.backend == "sandbox" else None
    if config.search.backend == "http":
        from agentrl.env.backends.http_search import HttpSearch

        if not config.search.url:
            raise ConfigError("search.url: required for the http search backend")
        search = HttpSearch(config.search)
    if config.fetch.backend == "http":
        from agentrl.env.backends.http_fetch import HttpFetch

        fetch = HttpFetch(config.fetch, exempt=tuple(config.fetch.allow_addresses))
    return search, fetch, cache
