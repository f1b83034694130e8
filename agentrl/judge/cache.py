"""The verdict cache: sqlite, keyed by everything that can change a verdict.

A key holds the judge settings that reach the model or shape what it is shown (``VERDICT_FIELDS``
of ``JudgeConfig``: model, server, sampling, samples, criteria per call, sources), the prompt
templates' hash, the rubric's content hash, the criterion's own content and the hash of what the
judge saw of the trajectory (task, sources, report). A second run over the same trajectories with
the same settings makes no calls at all, and a stored run can be re-scored offline; a run with
another temperature or server asks again. Only successful verdicts are stored; judge errors are
retried next time.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from pathlib import Path

from agentrl.errors import ConfigError
from agentrl.judge.config import JudgeConfig
from agentrl.judge.rubric import Criterion

__all__ = ["KEY_VERSION", "OTHER_FIELDS", "VERDICT_FIELDS", "VerdictCache", "cache_key"]

#: Bump when the key's layout changes (old rows then simply stop matching).
KEY_VERSION = 2
#: ``JudgeConfig`` fields that can change a verdict: each is part of every key.
VERDICT_FIELDS: tuple[str, ...] = (
    "model",
    "api_base",
    "temperature",
    "max_tokens",
    "response_format",
    "extra_kwargs",
    "samples",
    "criteria_per_call",
    "include_sources",
    "source_tools",
    "max_source_chars",
)
#: The fields that cannot (how hard the judge is pushed, what it costs, where the cache lives).
OTHER_FIELDS: tuple[str, ...] = (
    "api_key",
    "concurrency",
    "timeout_s",
    "max_retries",
    "max_parse_retries",
    "backoff_base_s",
    "backoff_max_s",
    "input_cost_per_token",
    "output_cost_per_token",
    "cache_path",
)


def cache_key(
    config: JudgeConfig, *, rubric_hash: str, prompt_hash: str, input_hash: str, criterion: Criterion
) -> str:
    """The key of one criterion's verdict: sha256 (hex) of the judge settings in ``VERDICT_FIELDS``,
    the prompt templates' hash, the rubric's hash, the criterion's content and the input's hash."""
    settings = {name: getattr(config, name) for name in VERDICT_FIELDS}
    parts = [
        KEY_VERSION,
        settings,
        prompt_hash,
        rubric_hash,
        criterion.model_dump(mode="json"),
        input_hash,
    ]
    blob = json.dumps(parts, sort_keys=True, default=repr, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()


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
