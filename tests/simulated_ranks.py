"""N simulated ranks in one process: each rank's call runs in a thread, and ``SimulatedReduce`` meets the
others at a barrier and sums (or maxes, or gathers) every rank's value in rank order.

A stand-in for ``torch.distributed`` that needs no processes, so a test can check that N shards of a
batch, each computed with the reduction, give what one process gives on the whole batch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch


class _Meeting:
    """Where the ranks' threads swap values: everyone posts, waits, reads all posts, waits."""

    def __init__(self, n: int) -> None:
        self.slots: list[Any] = [None] * n
        self.barrier = threading.Barrier(n, timeout=30)

    def exchange(self, rank: int, obj: Any) -> list[Any]:
        self.slots[rank] = obj
        self.barrier.wait()
        out = list(self.slots)
        self.barrier.wait()
        return out


class SimulatedReduce:
    """``agentrl.algos.Reduce`` for one of N threads that share a ``_Meeting``."""

    def __init__(self, meeting: _Meeting, rank: int) -> None:
        self.meeting, self.rank = meeting, rank

    def sum(self, x: torch.Tensor) -> torch.Tensor:
        parts = self.meeting.exchange(self.rank, x)
        total = parts[0].clone()
        for p in parts[1:]:
            total = total + p
        return total

    def max(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack(self.meeting.exchange(self.rank, x)).amax(0)

    def gather(self, obj: Any) -> list[Any]:
        return self.meeting.exchange(self.rank, obj)


def on_ranks(fn: Callable[..., Any], shards: Sequence[Any]) -> list[Any]:
    """``fn(shard, reduce)`` for every shard at once, one simulated rank each; results in rank order.
    An exception on any rank is raised here (the other ranks are released rather than left waiting)."""
    meeting = _Meeting(len(shards))
    results: list[Any] = [None] * len(shards)
    errors: list[BaseException] = []

    def run(rank: int) -> None:
        try:
            results[rank] = fn(shards[rank], SimulatedReduce(meeting, rank))
        except BaseException as e:  # re-raised below, on the caller's thread
            errors.append(e)
            meeting.barrier.abort()

    threads = [threading.Thread(target=run, args=(r,)) for r in range(len(shards))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise next((e for e in errors if not isinstance(e, threading.BrokenBarrierError)), errors[0])
    return results
