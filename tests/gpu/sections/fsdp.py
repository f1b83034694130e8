"""The FSDP2 path on one rank against the plain model, on the same batch: generation and the old
log-probs inside ``full_params``, then one GRPO update of each (plain SGD, so a step is the gradient
itself and the two steps compare directly). On a GPU the sharded model computes in bf16 through
FSDP's ``MixedPrecisionPolicy`` (fp32 master weights, fp32 gradient reduction) and the plain one
under bf16 autocast: the figures say how far apart those two ways of doing bf16 land.
"""

from __future__ import annotations

import os
import socket
import sys

import torch
import torch.distributed as dist

from tests.gpu.report import Recorder
from tests.gpu.shapes import add_rewards, gib, measure, random_lm, rollout

TITLE = "FSDP2 with one rank vs the plain model: sampling, old log-probs, one GRPO step"
BUDGET_S = 45.0
LR = 1e-3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def join_group(device: torch.device, rank: int = 0, world: int = 1, port: int | None = None) -> str:
    """Join a process group on 127.0.0.1: NCCL for one rank per GPU, gloo on a CPU (and for two ranks
    sharing one GPU, which NCCL refuses). Returns the backend."""
    backend = "nccl" if device.type == "cuda" and world == 1 else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device.index or 0)
    dist.init_process_group(
        backend, init_method=f"tcp://127.0.0.1:{port or free_port()}", rank=rank, world_size=world
    )
    return backend


def leave_group_and_exit() -> None:
    """End a spawned rank whose work is done and saved: leave the group together with the other rank,
    then skip the interpreter's teardown. A rank that destroyed its group while the other was still
    in a collective, or whose gloo threads were still joinable when C++ static destructors ran,
    aborted ("terminate called without an active exception", SIGABRT) after finishing: two kits
    side by side on 2 cores failed so in 2 of 36 two-rank runs."""
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def full_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter as one whole float32 tensor on the CPU (sharded ones gathered: a collective)."""
    from torch.distributed.tensor import DTensor

    out = {}
    for name, p in model.named_parameters():
        t = p.full_tensor() if isinstance(p, DTensor) else p
        out[name] = t.detach().float().cpu().clone()
    return out


def step_delta(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([(after[k] - before[k]).flatten() for k in sorted(before)])


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """‖a − b‖ / ‖b‖."""
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def run(ctx, rec: Recorder) -> None:  # type: ignore[no-untyped-def]
    from agentrl.learn.algorithm import AlgorithmConfig
    from agentrl.train.fsdp import full_params, shard_model
    from agentrl.train.update import chunked_forward, compute_advantages, forward_logprobs, update_actor

    dev = ctx.device
    rows, prompt, new = (8, 384, 128) if not ctx.dry_run else (4, 8, 6)
    shape = ctx.shape("0.5B")
    backend = join_group(dev)
    try:
        rec.figures({"backend": backend, "shape": shape, "rows": rows, "batch_tokens": rows * (prompt + new)})
        plain = random_lm(shape, dev)
        sharded = shard_model(random_lm(shape, dev), mixed_precision=dev.type == "cuda")
        batch, _ = rollout(plain, rows=rows, prompt=prompt, new=new)
        with full_params(sharded), measure(dev) as c:
            fsdp_batch, _ = rollout(sharded, rows=rows, prompt=prompt, new=new)
        on = batch["loss_mask"].bool()
        agree = (fsdp_batch["input_ids"] == batch["input_ids"])[on].float().mean().item()
        rec.figures({"fsdp_sample_tok_s": rows * new / c.seconds, "sampled_token_agreement": agree})

        def old_logprobs(model):  # type: ignore[no-untyped-def]
            with full_params(model):
                return chunked_forward(
                    lambda mb: forward_logprobs(model, mb, policy_only=True)[0], batch, 4096
                )

        old = old_logprobs(plain)
        lp_diff = (old_logprobs(sharded) - old)[on].abs()
        rec.figures(
            {
                "old_logprob_max_abs_diff": lp_diff.max().item(),
                "old_logprob_mean_abs_diff": lp_diff.mean().item(),
            }
        )
        batch["old_logprobs"] = old
        cfg = AlgorithmConfig(name="grpo", mini_batch_size=rows)
        compute_advantages(batch, cfg, add_rewards(batch, 2))
        deltas, metrics = {}, {}
        for name, model in (("plain", plain), ("fsdp", sharded)):
            before = full_weights(model)
            opt = torch.optim.SGD(model.parameters(), lr=LR)
            with measure(dev) as c:
                metrics[name] = update_actor(model, opt, batch, cfg, grad_clip=1e9)
            deltas[name] = step_delta(before, full_weights(model))
            rec.row("update", {"model": name, "update_s": c.seconds, "peak_gib": gib(c.peak_bytes),
                               **{k.split("/")[1]: v for k, v in metrics[name].items()}})  # fmt: skip
        step_diff = rel(deltas["fsdp"], deltas["plain"])
        g_plain, g_fsdp = metrics["plain"]["actor/grad_norm"], metrics["fsdp"]["actor/grad_norm"]
        rec.figures({"step_rel_diff": step_diff, "grad_norm_rel_diff": abs(g_fsdp - g_plain) / g_plain})
        bound = 0.1 if dev.type == "cuda" else 1e-4  # bf16 two ways on a GPU; float32 on a CPU
        rec.check("moved", deltas["plain"].norm().item() > 0, "the plain step changed the weights")
        rec.check("fsdp_step_equals_plain", step_diff < bound, f"‖Δ_fsdp − Δ_plain‖ / ‖Δ_plain‖ < {bound}")
    finally:
        dist.destroy_process_group()
