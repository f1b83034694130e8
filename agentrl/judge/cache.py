"""The verdict cache: sqlite, keyed by judge model, rubric hash, prompt hash, report hash and criterion.

A second run over the same trajectories with the same rubric, prompt templates and judge model
makes no calls at all, and a stored run can be re-scored offline. Only successful verdicts are
stored; judge errors are retried next time.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from pathlib import Path

from agentrl.errors import ConfigError

__all__ = ["VerdictCache", "cache_key"]


def cache_key(
    model: str, rubric_hash: str, prompt_hash: str, report_hash: str, criterion: str, samples: int
) -> str:
    """The key of one criterion's verdict (sha256 hex of the parts)."""
    parts = json.dumps([model, rubric_hash, prompt_hash, report_hash, criterion, samples])
    return hashlib.sha256(parts.encode("utf-8")).hexdigest()


class VerdictCache:
    """A small sqlite key → (verdict, reasoning) store, safe to share between threads and processes."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(self.path, timeout=30, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS verdicts (key TEXT PRIMARY KEY, verdict TEXT NOT NULL,"
                " reasoning TEXT NOT NULL, created REAL NOT NULL)"
            )
        except sqlite3.DatabaseError as e:  # not a database (corrupt, or some other file), unwritable, ...
            raise ConfigError(
                f"{self.path}: cannot use it as the verdict cache: {e}; delete it or pass --no-cache"
            ) from None

    def get(self, key: str) -> tuple[str, str] | None:
        """The cached ``(verdict, reasoning)`` for ``key``, or None."""
        with self._lock:
            row = self._db.execute("SELECT verdict, reasoning FROM verdicts WHERE key = ?", (key,)).fetchone()
        return None if row is None else (row[0], row[1])

    def put(self, key: str, verdict: str, reasoning: str) -> None:
        """Store one verdict (replacing an older one under the same key)."""
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO verdicts VALUES (?, ?, ?, ?)", (key, verdict, reasoning, time.time())
            )

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0])

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()
