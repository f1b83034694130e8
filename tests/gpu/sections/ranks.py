"""Two ranks sharing the device take the step one process takes: DDP (agentrl's explicit gradient
all-reduce) and FSDP2, each rank holding its block of rows of one batch, against the same update in
one process (REINFORCE++, shuffled mini-batches over both ranks' rows: ``tests.train.
rank_update_worker``'s batch and settings). NCCL refuses two ranks on one GPU, so the ranks talk
through gloo with their tensors on the GPU; where gloo cannot carry a collective the row says so
(FSDP2: ``shard_model`` refuses CUDA parameters under gloo, whose DTensor gathers crash).
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.gpu.report import Recorder
from tests.gpu.sections.fsdp import free_port, full_weights, join_group, leave_group_and_exit, rel, step_delta
from tests.gpu.shapes import random_lm

TITLE = "DDP and FSDP2 on two ranks sharing the device vs one process"
BUDGET_S = 60.0


def _update(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, float]:
    """``rank_update_worker.update``'s step on ``model``: advantages over every rank, then SGD."""
    from agentrl.train.update import compute_advantages, update_actor
    from tests.train.rank_update_worker import CFG

    metrics = compute_advantages(batch, CFG, list(range(len(batch["input_ids"]))))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    gen = torch.Generator().manual_seed(5)
    return metrics | update_actor(model, opt, batch, CFG, grad_clip=100.0, generator=gen)


def _model(shape: str, device: torch.device) -> torch.nn.Module:
    return random_lm(shape, device, seed=3)


def _batch(device: torch.device, rank: int = 0, world: int = 1) -> dict[str, torch.Tensor]:
    from tests.train.rank_update_worker import make_batch, shard

    return {k: v.to(device) for k, v in shard(make_batch(), rank, world).items()}


def _worker(rank: int, mode: str, shape: str, device: str, port: int, out: str) -> None:
    """One of two ranks: join the group, take the step on this rank's rows, and (rank 0) save the
    weights before and after it and the metrics."""
    from agentrl.train.fsdp import shard_model

    dev = torch.device(device)
    join_group(dev, rank, 2, port)
    try:
        model = _model(shape, dev)
        if mode == "fsdp":
            shard_model(model, mixed_precision=dev.type == "cuda")
        before = full_weights(model)
        metrics = _update(model, _batch(dev, rank, 2))
        after = full_weights(model)  # gathering the shards is a collective: every rank calls it
        if rank == 0:
            torch.save({"before": before, "after": after, "metrics": metrics}, out)
    except BaseException:
        dist.destroy_process_group()  # its side only: never wait on a rank that may be gone
        raise
    leave_group_and_exit()


def _two_ranks(mode: str, shape: str, dev: torch.device, out: Path, deadline: float) -> str | None:
    """Run ``_worker`` on two spawned processes (CUDA cannot be forked, and a fork of a process with
    threads, such as a pytest-xdist worker's, can hang in the child); None when both finished, else
    why not."""
    pc = mp.start_processes(_worker, args=(mode, shape, str(dev), free_port(), str(out)), nprocs=2,
                            join=False, start_method="spawn")  # fmt: skip
    try:
        while not pc.join(timeout=1.0):
            if time.monotonic() > deadline:
                return "no time left: the two ranks were stopped"
    except Exception as e:  # a rank raised: its error, first line
        return f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:200]}"
    finally:
        for p in pc.processes:
            if p.is_alive():
                p.terminate()
    return None


def run(ctx, rec: Recorder) -> None:  # type: ignore[no-untyped-def]
    dev = ctx.device
    shape = "dry"  # equality, not speed: a small model (the batch's ids are < 48)
    rec.figures(
        {"shape": shape, "backend": "gloo", "rows": int(_batch(torch.device("cpu"))["input_ids"].shape[0])}
    )
    one = _model(shape, dev)
    before = full_weights(one)
    ref_metrics = _update(one, _batch(dev))
    ref = step_delta(before, full_weights(one))
    rec.check("moved", ref.norm().item() > 0, "the one-process step changed the weights")
    bound = 0.05 if dev.type == "cuda" else 1e-4  # bf16 autocast over other padding widths on a GPU
    for mode in ("ddp", "fsdp"):
        out = ctx.scratch / f"{mode}.pt"
        if ctx.left() < 15:
            rec.row("ranks", {"mode": mode, "skipped": "no time left"})
            continue
        t0 = time.monotonic()
        why = _two_ranks(mode, shape, dev, out, ctx.deadline - 5)
        if why is not None:
            rec.row("ranks", {"mode": mode, "skipped": why})
            if dev.type == "cpu":  # gloo on a CPU carries every collective: this is a failure
                rec.check(f"{mode}_ran", False, why)
            continue
        got = torch.load(out, weights_only=False)
        diff = rel(step_delta(got["before"], got["after"]), ref)
        m = got["metrics"]
        rec.row("ranks", {"mode": mode, "seconds": time.monotonic() - t0, "step_rel_diff": diff,
                          "pg_loss": m["actor/pg_loss"], "pg_loss_one_process": ref_metrics["actor/pg_loss"],
                          "grad_norm": m["actor/grad_norm"], "grad_norm_one_process": ref_metrics["actor/grad_norm"]})  # fmt: skip
        rec.check(f"{mode}_equals_one_process", diff < bound, f"‖Δ_2 ranks − Δ_1‖ / ‖Δ_1‖ < {bound}")
