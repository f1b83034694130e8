"""Atomic writes of a run's files: a temporary file beside the target (``.NAME.tmp-PID``, which
``layout.in_layout`` counts as the file itself), then a rename, so a reader never sees half a file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from agentrl.jsonl import dumps


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (a temporary file beside it, then a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_json(path: Path, data: Any) -> Path:
    """``data`` as indented strict JSON (with a final newline), written atomically; a number that is
    not finite raises ``ValueError`` naming its field (``agentrl.jsonl.dumps``)."""
    write_atomic(path, (dumps(data, indent=2) + "\n").encode())
    return path
