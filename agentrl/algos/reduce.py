"""How a batch statistic sees the whole batch when N ranks each hold a shard of its rows.

Every batch-level statistic in ``agentrl.algos`` (whitening, group baselines, the KL controller's
batch KL, mini-batch membership) takes a ``Reduce``. A statistic is built only from *sums over
rows* (counts, Σx, Σ(x − mean)²) and maxima, which the reduction combines across ranks before
any division, so each rank ends with the global statistic and N ranks compute what one process
computes on the concatenated batch. ``LOCAL``, the default, is one process: every operation is the
identity. ``agentrl.train.distributed.rank_reduce`` is the ``torch.distributed`` one.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch

__all__ = ["LOCAL", "LocalReduce", "Reduce"]


@runtime_checkable
class Reduce(Protocol):
    """The collective operations a batch statistic needs; every rank must make the same calls in the
    same order (they are collectives) with tensors of the same shape."""

    @property
    def rank(self) -> int:
        """This rank's position (0-based); rows are numbered globally in rank order."""
        ...

    def sum(self, x: torch.Tensor) -> torch.Tensor:
        """Elementwise Σ of ``x`` over ranks; same shape, dtype and device as ``x``."""
        ...

    def max(self, x: torch.Tensor) -> torch.Tensor:
        """Elementwise max of ``x`` over ranks; same shape, dtype and device as ``x``."""
        ...

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (a picklable value), in rank order."""
        ...


class LocalReduce:
    """One process holds the whole batch: every reduction is the identity."""

    rank = 0

    def sum(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def max(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def gather(self, obj: Any) -> list[Any]:
        return [obj]


LOCAL = LocalReduce()
