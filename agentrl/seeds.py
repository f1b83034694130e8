"""The one seed function (layer 0): every seed a run derives comes from ``stable_seed``.

Episode reset seeds (``episode_seed``, the one recipe of every path that starts episodes: ``agentrl
rollout``, ``agentrl eval``, the evaluation during training, the trainer's steps, the TRL adapter),
turn sampling seeds (``agentrl.rollout.episode``), the trainer's task, update and warm-start seeds
and the oracle's per-episode choice are all ``stable_seed(parts..., nbytes=, bits=)`` of their own
parts, so they are stable across processes, platforms and scheduling order, and each keeps the
width it has always had.
"""

from __future__ import annotations

import hashlib
from typing import Any

__all__ = ["episode_seed", "stable_seed"]


def stable_seed(*parts: Any, nbytes: int = 8, bits: int = 63) -> int:
    """The seed of ``parts``: sha256 of ``"p0:p1:..."``, its first ``nbytes`` bytes as a big-endian
    int, the low ``bits`` bits kept."""
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:nbytes], "big") & ((1 << bits) - 1)


def episode_seed(seed: int, task_id: str, sample: int, *, step: int | None = None) -> int:
    """The env's reset seed (31 bits) of sample ``sample`` of task ``task_id`` in a run seeded ``seed``.

    Without ``step`` (``agentrl rollout``, ``agentrl eval``, the evaluation during training) it
    depends on (seed, task, sample) only, so an evaluation pairs episode for episode with a rollout
    of the same seed. Training step ``step`` (the trainer's RL step, the TRL adapter's rollout call)
    hashes the step in before the task, so each step draws new episodes. Each form keeps the digest
    width it was introduced with (4 bytes without a step, 8 with): existing runs draw the same
    episodes."""
    if step is None:
        return stable_seed(seed, task_id, sample, nbytes=4, bits=31)
    return stable_seed(seed, step, task_id, sample, bits=31)
