"""The one seed function (layer 0): every seed a run derives comes from ``stable_seed``.

Episode reset seeds, turn sampling seeds (``agentrl.rollout.episode``), the trainer's task, update
and warm-start seeds, the TRL adapter's episode seeds and the oracle's per-episode choice are all
``stable_seed(parts..., nbytes=, bits=)`` of their own parts, so they are stable across processes,
platforms and scheduling order, and each keeps the width it has always had.
"""

from __future__ import annotations

import hashlib
from typing import Any

__all__ = ["stable_seed"]


def stable_seed(*parts: Any, nbytes: int = 8, bits: int = 63) -> int:
    """The seed of ``parts``: sha256 of ``"p0:p1:..."``, its first ``nbytes`` bytes as a big-endian
    int, the low ``bits`` bits kept."""
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:nbytes], "big") & ((1 << bits) - 1)
