"""How many intra-op threads torch uses while a model samples on a CPU.

Decoding runs one token per row through every layer: for a small model each op is a few
microseconds of arithmetic, too little to split. A second thread then gains little when the cores
are quiet (the quickstart's rollout: 0.61 s at 2 threads, 0.73 s at 1, on a 2-core AMD EPYC), and
when another process is busy on the cores the threads of each op wait for one another (0.61 s
became 4.5 s at 2 threads and 1.15 s at 1; ``BENCHMARKS.md``, "Sampling at the model's speed").
The update's ops are larger: they keep every thread (1 thread doubled the quickstart's update).

``sampling_threads(model, "auto")`` is therefore 1 for a model on a CPU with under
``SMALL_MODEL_PARAMS`` parameters outside its embeddings, and None (as started) otherwise; an int is
taken as given. ``intra_op_threads(n)`` sets it for a block and puts the previous count back.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

import torch
from torch import nn

__all__ = ["SMALL_MODEL_PARAMS", "ThreadsSetting", "describe", "intra_op_threads", "sampling_threads"]

#: Under this many parameters outside the embeddings, a model samples on one CPU thread ("auto").
SMALL_MODEL_PARAMS = 20_000_000

ThreadsSetting = int | Literal["auto"] | None


def _body_params(model: nn.Module) -> int:
    """Parameters outside the input and output embeddings (tied or not)."""
    skip: set[int] = set()
    for get in ("get_input_embeddings", "get_output_embeddings"):
        module = getattr(model, get, lambda: None)()
        if module is not None:
            skip.update(id(p) for p in module.parameters())
    return sum(p.numel() for p in model.parameters() if id(p) not in skip)


def sampling_threads(model: nn.Module, setting: ThreadsSetting) -> int | None:
    """The intra-op threads to sample with: ``setting`` when it is a count; with ``"auto"``, 1 for a
    small model on a CPU (``SMALL_MODEL_PARAMS``), else None (the process's count, untouched)."""
    if setting is None or isinstance(setting, int):
        return setting
    device = next(model.parameters()).device
    if device.type != "cpu" or _body_params(model) >= SMALL_MODEL_PARAMS:
        return None
    return 1


def describe(model: nn.Module, setting: ThreadsSetting) -> str:
    """One line for the run's log: the threads sampling and updating use, and why."""
    n, now = sampling_threads(model, setting), torch.get_num_threads()
    if setting == "auto":
        why = f"auto: {_body_params(model) / 1e6:.1f}M parameters outside the embeddings"
        why += ", ops too small to split" if n == 1 else ""
    else:
        why = "rollout.sampling_threads"
    return f"threads: sampling {n or now} ({why}), update {now}"


@contextmanager
def intra_op_threads(n: int | None) -> Iterator[None]:
    """torch's intra-op thread count set to ``n`` for the block (None: unchanged), then restored."""
    if n is None or n == torch.get_num_threads():
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
