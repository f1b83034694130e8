"""A run's JSON files, written atomically (``agentrl.atomic.write_atomic``: a temporary file beside
the target, ``.NAME.tmp-PID``, which ``layout.in_layout`` counts as the file itself; fsync; rename)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentrl.atomic import write_atomic
from agentrl.jsonl import dumps

__all__ = ["write_atomic", "write_json"]


def write_json(path: Path, data: Any) -> Path:
    """``data`` as indented strict JSON (with a final newline), written atomically; a number that is
    not finite raises ``ValueError`` naming its field (``agentrl.jsonl.dumps``)."""
    write_atomic(path, (dumps(data, indent=2) + "\n").encode())
    return path
