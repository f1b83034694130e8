"""Where generated data lives: the generated sandboxes and the BM25 indexes."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir"]


def cache_dir() -> Path:
    """``$AGENTRL_CACHE``, else ``$XDG_CACHE_HOME/agentrl``, else ``~/.cache/agentrl``."""
    root = os.environ.get("AGENTRL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "agentrl"
    )
    return Path(root)
