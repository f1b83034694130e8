"""SDPA attention (transformers' default, what every agentrl forward pass runs) against eager attention
on the same batch, right-padded and packed (several rows to a line under a block-causal mask, as the
update's micro-batches run): the trainer's log-probabilities must agree, and the figures say what
SDPA saves in time and memory.
"""

from __future__ import annotations

import torch

from tests.gpu.report import Recorder
from tests.gpu.shapes import gib, measure, random_lm

TITLE = "SDPA vs eager attention, padded and packed rows: equal log-probs, time, memory"
BUDGET_S = 30.0


def padded_batch(rows: int, length: int, vocab: int, device: torch.device) -> dict[str, torch.Tensor]:
    """``rows`` right-padded rows of random ids: the first ``length`` tokens long, the others about
    half of it and shorter each (so packing puts two to a line); every real token after the first
    is scored (``loss_mask``)."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (rows, length), generator=g)
    attn = torch.zeros(rows, length, dtype=torch.long)
    attn[0] = 1
    for i in range(1, rows):
        attn[i, : length // 2 - (i - 1) * length // (4 * rows)] = 1
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
    from agentrl.learn.forward import _Packing

    lines = _Packing(batch, model).inputs["input_ids"].shape[0]
    rec.figures({"shape": ctx.shape("0.5B"), "rows": rows, "packed_lines": lines,
                 "tokens": int(batch["attention_mask"].sum())})  # fmt: skip
    rec.check("packs", lines < rows, f"{rows} rows in {lines} lines")
    out = {}
    for impl in ("sdpa", "eager"):
        model.set_attn_implementation(impl)
        # padded: right-padded rows (the old-log-prob pass); packed: the rows packed into fewer
        # lines with a block-causal mask (the update's micro-batches, pack_sequences: true)
        for layout in ("padded", "packed"):
            times = []
            with torch.no_grad():
                for _ in range(3):  # the first warms up
                    with measure(dev) as c:
                        lp, _ = forward_logprobs(model, batch, policy_only=True, pack=layout == "packed")
                    times.append(c.seconds)
            out[impl, layout] = lp
            rec.row("attention", {"impl": impl, "layout": layout, "forward_s": min(times[1:]),
                                  "peak_gib": gib(c.peak_bytes), "finite": bool(torch.isfinite(lp[real]).all())})  # fmt: skip
    bound = 0.5 if dev.type == "cuda" else 1e-3  # bf16 autocast on a GPU; float32 on a CPU
    for name, a, b in (("sdpa_vs_eager", ("sdpa", "padded"), ("eager", "padded")),
                       ("sdpa_vs_eager_packed", ("sdpa", "packed"), ("eager", "packed")),
                       ("packed_vs_padded", ("sdpa", "packed"), ("sdpa", "padded"))):  # fmt: skip
        diff = (out[a] - out[b])[real].abs()
        rec.figures({f"{name}_max_abs_diff": diff.max().item(), f"{name}_mean_abs_diff": diff.mean().item()})
        rec.check(name, diff.max().item() < bound, f"max |Δ log p| < {bound}")
    rec.check(
        "finite", all(bool(torch.isfinite(v[real]).all()) for v in out.values()), "log-probs of real tokens"
    )
