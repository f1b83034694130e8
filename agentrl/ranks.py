"""Which process this is among the ranks of a ``torchrun`` launch: the one answer to "rank 0?".

``is_main()`` asks the process group once it is joined and ``$RANK`` before that (``torchrun`` sets
it; a plain process has rank 0), so a check made before ``init_distributed`` (the preflight) and one
made after it agree. ``rank()`` and ``world_size()`` are the process group's (0 and 1 without one):
they shard the work, which only a joined group may do. ``all_gather_objects`` is the one object collective the samplers need (the vLLM
engine learns the served model name from rank 0). The gradient and batch-statistic collectives live
with the trainer (``agentrl.train.distributed``).
"""

from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["all_gather_objects", "barrier", "is_main", "rank", "world_size"]


def _dist() -> Any:
    """``torch.distributed`` when this process has joined a process group, else None. Without torch
    imported no group can exist, so this module never imports torch (the preflight runs without it)."""
    dist = sys.modules.get("torch.distributed")
    return dist if dist is not None and dist.is_available() and dist.is_initialized() else None


def world_size() -> int:
    """The number of ranks in the process group (1 without one)."""
    dist = _dist()
    return dist.get_world_size() if dist is not None else 1


def rank() -> int:
    """This process's rank in the process group (0 without one)."""
    dist = _dist()
    return dist.get_rank() if dist is not None else 0


def is_main() -> bool:
    """Whether this process is rank 0 (it writes the run's files and talks to servers): the process
    group's rank once joined, else ``$RANK`` when ``$WORLD_SIZE`` > 1 (a ``torchrun`` rank before it
    joins); a single process is rank 0 whatever ``$RANK`` a scheduler left in its environment."""
    dist = _dist()
    if dist is not None:
        return dist.get_rank() == 0
    try:  # $RANK counts only in a multi-process launch: a stray one in a single process does not
        if int(os.environ.get("WORLD_SIZE", "1") or 1) <= 1:
            return True
    except ValueError:
        return True
    return os.environ.get("RANK", "0").strip() in ("", "0")


def all_gather_objects(obj: Any) -> list[Any]:
    """Every rank's ``obj``, in rank order (``[obj]`` without a process group)."""
    dist = _dist()
    if dist is None:
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def barrier() -> None:
    """Wait for every rank (nothing without a process group)."""
    dist = _dist()
    if dist is not None:
        dist.barrier()
