"""Data parallelism across processes (``torchrun``): NCCL on GPUs, gloo on CPUs.

Each rank runs its share of the episodes and a share of every mini-batch; losses are normalised by
counts summed over all ranks and gradients are summed with an explicit all-reduce before the
optimiser step, so a step on N ranks equals the single-process step on the same data (up to float
summation order). Explicit all-reduce rather than the DDP wrapper keeps ranks with different
numbers of micro-batches in step: every rank makes the same number of collective calls.
Which rank a process is (and the one object gather) is ``agentrl.ranks``, re-exported here.
Batch statistics (whitening, group baselines, the batch KL, mini-batch membership) are reduced over
ranks by ``rank_reduce()``, the ``torch.distributed`` implementation of ``agentrl.algos.Reduce``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist

from agentrl.algos import LOCAL, Reduce
from agentrl.ranks import all_gather_objects, barrier, is_main, rank, world_size

__all__ = [
    "all_gather_objects",
    "all_reduce_grads",
    "all_reduce_max",
    "all_reduce_sum",
    "barrier",
    "broadcast_parameters",
    "init_distributed",
    "is_main",
    "rank",
    "rank_reduce",
    "shutdown_distributed",
    "world_size",
]


_JOINED: list[bool] = []  # non-empty once init_distributed joined a group: shutdown_distributed ends it


def init_distributed() -> torch.device | None:
    """Join the process group when launched by ``torchrun`` (WORLD_SIZE > 1); returns the rank's
    CUDA device when GPUs are used, else None."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or dist.is_initialized():
        return None
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        dist.init_process_group(backend="nccl")
        _JOINED.append(True)
        return torch.device("cuda", local)
    dist.init_process_group(backend="gloo")
    _JOINED.append(True)
    return None


def shutdown_distributed(*, wait: bool) -> None:
    """Leave the process group at the end of a run: with ``wait``, every rank first waits for the
    others (rank 0 still writes the summary), then the group is destroyed. A rank that exited with
    the group alive could abort in the backend's teardown ("terminate called without an active
    exception", SIGABRT: a 2-rank gloo run failed so after finishing its work). Without ``wait`` (a
    rank that failed) it only destroys its side, never blocking on ranks that may be gone."""
    if not (_JOINED and dist.is_initialized()):
        return  # a group someone else made (a test, a launcher library) is theirs to end
    _JOINED.clear()
    if wait:
        dist.barrier()
    dist.destroy_process_group()


def _backend_device() -> torch.device:
    """Where a collective's tensor must live: the rank's GPU under NCCL (which has no CPU tensors),
    the CPU under gloo."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_sum(x: float) -> float:
    """Σ of a number over ranks."""
    if not dist.is_initialized():
        return x
    t = torch.tensor([x], dtype=torch.float64, device=_backend_device())
    dist.all_reduce(t)
    return float(t.item())


def all_reduce_max(x: int) -> int:
    """max of an integer over ranks."""
    if not dist.is_initialized():
        return x
    t = torch.tensor([x], dtype=torch.int64, device=_backend_device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def all_reduce_grads(params: Iterable[torch.nn.Parameter]) -> None:
    """Sum every parameter's gradient over ranks (a missing gradient counts as zero)."""
    if not dist.is_initialized():
        return
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad)


def broadcast_parameters(module: torch.nn.Module) -> None:
    """Copy rank 0's parameters and buffers to every rank."""
    if not dist.is_initialized():
        return
    for t in list(module.parameters()) + list(module.buffers()):
        dist.broadcast(t.data, src=0)


class _RankReduce:
    """``agentrl.algos.Reduce`` over the default process group. Tensors travel on the backend's
    device (the rank's GPU under NCCL, the CPU under gloo) and come back on their own."""

    @property
    def rank(self) -> int:
        return dist.get_rank()

    def _all_reduce(self, x: torch.Tensor, op: dist.ReduceOp.RedOpType) -> torch.Tensor:
        y = x.detach().to(_backend_device(), copy=True)
        dist.all_reduce(y, op=op)
        return y.to(x.device)

    def sum(self, x: torch.Tensor) -> torch.Tensor:
        return self._all_reduce(x, dist.ReduceOp.SUM)

    def max(self, x: torch.Tensor) -> torch.Tensor:
        return self._all_reduce(x, dist.ReduceOp.MAX)

    def gather(self, obj: Any) -> list[Any]:
        return all_gather_objects(obj)


def rank_reduce() -> Reduce:
    """The reduction that batch statistics use here: over every rank under ``torchrun``, else the
    identity (``agentrl.algos.LOCAL``)."""
    return _RankReduce() if dist.is_initialized() else LOCAL
