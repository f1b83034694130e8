"""Which rows make up each mini-batch, when ranks each hold a shard of the batch's rows.

One process shuffles its B rows and cuts the permutation into mini-batches. For N ranks to take
the step one process takes, a mini-batch must hold the same rows whichever rank each row lives
on, so the shuffle is over the *global* row numbering — rank 0's rows first, then rank 1's, …
(the trainer lays rows out so that this is the one-process order) — and each rank keeps its own
rows of every global mini-batch.
"""

from __future__ import annotations

import torch

from agentrl.algos.reduce import LOCAL, Reduce

__all__ = ["mini_batch_rows"]


def mini_batch_rows(
    n_rows: int,
    mini_batch_size: int,
    generator: torch.Generator | None = None,
    *,
    reduce: Reduce = LOCAL,
) -> list[torch.Tensor]:
    """This rank's rows (local indices, int64 [k] each) of every mini-batch of one epoch.

    A permutation of the global rows 0..N−1 (N summed over ranks; rank 0's permutation, drawn from
    ``generator``, is used by all) is cut into mini-batches of ``mini_batch_size`` global rows, the
    last one shorter; each rank keeps the rows it holds, in the permutation's order. Every rank gets
    the same number of mini-batches, some possibly empty, so that collective calls line up.
    """
    if mini_batch_size < 1:
        raise ValueError(f"mini_batch_size must be ≥ 1, got {mini_batch_size}")
    sizes = reduce.gather(int(n_rows))
    total, offset = sum(sizes), sum(sizes[: reduce.rank])
    perm = reduce.gather(torch.randperm(total, generator=generator))[0]
    out = []
    for start in range(0, total, mini_batch_size):
        chunk = perm[start : start + mini_batch_size]
        mine = (chunk >= offset) & (chunk < offset + n_rows)
        out.append(chunk[mine] - offset)
    return out
