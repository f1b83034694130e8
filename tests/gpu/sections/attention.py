"""SDPA attention (transformers' default, what every agentrl forward pass runs) against eager attention
on the same right-padded batch: the trainer's log-probabilities must agree, and the figures say what
SDPA saves in time and memory.
"""

from __future__ import annotations

import torch

from tests.gpu.report import Recorder
from tests.gpu.shapes import gib, measure, random_lm

TITLE = "SDPA vs eager attention on a padded batch: equal log-probs, time, memory"
BUDGET_S = 30.0


def padded_batch(rows: int, length: int, vocab: int, device: torch.device) -> dict[str, torch.Tensor]:
    """``rows`` right-padded rows of random ids, row i holding ``length − i·length/(2·rows)`` tokens;
    every real token after the first is scored (``loss_mask``)."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (rows, length), generator=g)
    attn = torch.zeros(rows, length, dtype=torch.long)
    for i in range(rows):
        attn[i, : length - i * length // (2 * rows)] = 1
    batch = {
        "input_ids": ids * attn,
        "attention_mask": attn,
        "position_ids": (attn.cumsum(-1) - 1).clamp_min(0),
        "loss_mask": attn.clone(),
    }
    return {k: v.to(device) for k, v in batch.items()}


def run(ctx, rec: Recorder) -> None:  # type: ignore[no-untyped-def]
    from agentrl.learn.forward import forward_logprobs

    dev = ctx.device
    rows, length = (8, 1024) if not ctx.dry_run else (3, 24)
    model = random_lm(ctx.shape("0.5B"), dev).eval()
    batch = padded_batch(rows, length, model.config.vocab_size, dev)
    real = batch["loss_mask"].bool()
    real[:, 0] = False
    rec.figures({"shape": ctx.shape("0.5B"), "rows": rows, "tokens": int(batch["attention_mask"].sum())})
    out = {}
    for impl in ("sdpa", "eager"):
        model.set_attn_implementation(impl)
        times = []
        with torch.no_grad():
            for _ in range(3):  # the first warms up
                with measure(dev) as c:
                    lp, _ = forward_logprobs(model, batch, policy_only=True)
                times.append(c.seconds)
        out[impl] = lp
        rec.row("attention", {"impl": impl, "forward_s": min(times[1:]), "peak_gib": gib(c.peak_bytes),
                              "finite": bool(torch.isfinite(lp[real]).all())})  # fmt: skip
    diff = (out["sdpa"] - out["eager"])[real].abs()
    rec.figures({"logprob_max_abs_diff": diff.max().item(), "logprob_mean_abs_diff": diff.mean().item()})
    bound = 0.5 if dev.type == "cuda" else 1e-3  # bf16 autocast on a GPU; float32 on a CPU
    rec.check(
        "finite", all(bool(torch.isfinite(v[real]).all()) for v in out.values()), "log-probs of real tokens"
    )
    rec.check("sdpa_equals_eager", diff.max().item() < bound, f"max |Δ log p| < {bound}")
