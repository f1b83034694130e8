"""Record/replay of tool calls in sqlite, keyed by tool + normalised arguments + the env's date.

``record`` stores every result (failures too, so a 404 replays as a 404); ``replay`` answers only
from the file and never touches a backend: a call that was never recorded is a ``ToolFailure``.
The same seed and the same replay cache therefore give identical trajectories.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from agentrl.env.backends.base import ToolFailure
from agentrl.errors import ConfigError

__all__ = ["ToolCache", "cache_key", "normalize_args"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tool_calls (
    key TEXT PRIMARY KEY,
    tool TEXT NOT NULL,
    args TEXT NOT NULL,
    result TEXT NOT NULL,
    recorded_at REAL NOT NULL
)
"""


def normalize_args(tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """The arguments that decide a tool's result, in canonical form (whitespace collapsed, URL
    normalised, defaults filled)."""
    if tool == "search":
        return {
            "query": " ".join(str(args.get("query", "")).split()),
            "k": int(args.get("k", 5)),
            **_world(args),
        }
    if tool == "fetch":
        from agentrl.env.backends.sandbox import normalize_url

        return {"url": normalize_url(str(args.get("url", ""))), **_world(args)}
    return dict(sorted(args.items()))


def _world(args: dict[str, Any]) -> dict[str, Any]:
    """A task's world is part of a call's key when it has one (a call without one keys as before)."""
    return {"world": str(args["world"])} if args.get("world") is not None else {}


def cache_key(tool: str, args: dict[str, Any], before: dt.date | None) -> str:
    """sha256 of the tool, its normalised arguments and the clock date."""
    canon = json.dumps(
        {"tool": tool, "args": normalize_args(tool, args), "before": before.isoformat() if before else None},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canon.encode("utf-8")).hexdigest()


class ToolCache:
    """A sqlite file of tool results; thread-safe (one connection behind a lock)."""

    def __init__(self, path: str | Path, mode: Literal["record", "replay"]):
        self.path = Path(path)
        self.mode = mode
        if mode == "replay" and not self.path.exists():
            raise ConfigError(f"cache.path: replay cache {self.path} does not exist (record one first)")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        uri = f"file:{self.path}?mode=ro" if mode == "replay" else str(self.path)
        self._db = sqlite3.connect(uri, uri=mode == "replay", check_same_thread=False, timeout=30)
        if mode == "record":
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(_SCHEMA)
            self._db.commit()
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored result for ``key``, or None."""
        with self._lock:
            row = self._db.execute("SELECT result FROM tool_calls WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def put(self, key: str, tool: str, args: dict[str, Any], result: dict[str, Any]) -> None:
        """Store (or overwrite) one result."""
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO tool_calls VALUES (?, ?, ?, ?, ?)",
                (
                    key,
                    tool,
                    json.dumps(args, sort_keys=True),
                    json.dumps(result, sort_keys=True),
                    time.time(),
                ),
            )
            self._db.commit()

    def call(
        self, tool: str, args: dict[str, Any], before: dt.date | None, run: Callable[[], dict[str, Any]]
    ) -> dict[str, Any]:
        """The result of ``run()`` through the cache: replayed, or run and recorded.

        ``run`` returns a JSON-ready dict and may raise ``ToolFailure``; a failure is recorded as
        ``{"error": message}`` and raised again on replay.
        """
        key = cache_key(tool, args, before)
        stored = self.get(key)
        if stored is not None:
            self.hits += 1
        elif self.mode == "replay":
            self.misses += 1
            raise ToolFailure(f"{tool} {json.dumps(normalize_args(tool, args))} is not in the replay cache")
        else:
            self.misses += 1
            try:
                stored = {"ok": run()}
            except ToolFailure as e:
                stored = {"error": str(e)}
            self.put(key, tool, normalize_args(tool, args), stored)
        if "error" in stored:
            raise ToolFailure(stored["error"])
        return stored["ok"]

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM tool_calls").fetchone()[0])

    def close(self) -> None:
        """Close the sqlite connection."""
        with self._lock:
            self._db.close()
