"""The gap between the sampler's log-probs and the trainer's, on the same batch: the sampler is
agentrl's HF engine (``sample_batch``: left-padded prefill, then one token at a time on the KV cache),
the trainer the update's forward pass (``forward_logprobs``: the whole right-padded row at once, the
LM head in chunks). In float32 on a CPU they agree to rounding; in bf16 on a GPU they do not, and
that gap is what ``algorithm.rollout_correction`` exists for. Its diagnostics (``rollout_corr/*``,
docs/training.md) are computed here on that real gap, with token IS at 2.0 and k3 rejection.

A randomly initialised model is either nearly uniform over 151,936 tokens or, with tied embeddings,
nearly sure of repeating its input token; bf16 barely disturbs either. The final norm's weight is
scaled until the next-token entropy is about 2 nats, as in a trained model (``sharpen``; the mean
entropy is reported beside the gap).
"""

from __future__ import annotations

import math

import torch

from tests.gpu.report import Recorder
from tests.gpu.shapes import random_lm, rollout

TITLE = "sampler (KV cache) vs trainer log-probs in bf16, with rollout-correction diagnostics"
BUDGET_S = 45.0

ENTROPY_NATS = 2.0  # about what a trained model's next-token distribution has
CORRECTION = {"rollout_is": "token", "rollout_is_threshold": 2.0, "rollout_rs": "token_k3,seq_max_k3",
              "rollout_rs_threshold": "0.01,0.1"}  # fmt: skip


def sharpen(model: torch.nn.Module, entropy: float = ENTROPY_NATS, steps: int = 14) -> float:
    """Scale the final norm's weight until the mean next-token entropy on random ids is about
    ``entropy`` nats (a bisection on the log of the scale; entropy falls as the scale grows); returns
    the entropy reached. A random model with tied embeddings mostly predicts its input token again,
    so the scale is found by measuring, not from the init's statistics."""
    from agentrl.learn.forward import forward_logprobs

    norm = model.get_decoder().norm.weight
    base = norm.detach().clone()
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, model.config.vocab_size, (4, 64), generator=g).to(norm.device)
    probe = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "loss_mask": torch.ones_like(ids),
             "position_ids": torch.arange(64, device=ids.device).expand(4, -1)}  # fmt: skip
    lo, hi, got = math.log(1e-3), math.log(1e3), float("nan")
    with torch.no_grad():
        for _ in range(steps):
            mid = (lo + hi) / 2
            norm.copy_(base * math.exp(mid))
            _, ent = forward_logprobs(model, probe, with_entropy=True, policy_only=True)
            got = ent[:, 1:].mean().item()
            lo, hi = (mid, hi) if got > entropy else (lo, mid)
    return got


def compare(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, float]:
    """The trainer's old log-probs of a sampled batch (phase 4: micro-batches, policy tokens) against
    the sampler's (``rollout_logprobs``): |Δ log p| and the rollout-correction diagnostics."""
    from agentrl.algos.rollout_correction import rollout_correction
    from agentrl.learn.forward import chunked_forward, forward_logprobs

    with torch.no_grad():
        trainer, entropy = forward_logprobs(model, batch, with_entropy=True, policy_only=True)
        old = chunked_forward(lambda mb: forward_logprobs(model, mb, policy_only=True)[0], batch, 4096)
    mask = batch["loss_mask"].bool()
    sampler = batch["rollout_logprobs"]
    diff = (old - sampler)[mask].abs()
    _, _, corr = rollout_correction(old, sampler, mask, **CORRECTION)
    return {
        "entropy_mean": entropy[mask].mean().item(),
        "max_abs_diff": diff.max().item(),
        "mean_abs_diff": diff.mean().item(),
        "microbatch_max_abs_diff": (trainer - old)[mask].abs().max().item(),
        **{k.removeprefix("rollout_corr/"): v for k, v in corr.items()},
    }


def run(ctx, rec: Recorder) -> None:  # type: ignore[no-untyped-def]
    dev = ctx.device
    rows, prompt, new = (16, 512, 256) if not ctx.dry_run else (4, 10, 8)
    shape = ctx.shape("0.5B")
    rec.figures({"shape": shape, "rows": rows, "prompt_tokens": prompt, "new_tokens": new})
    rec.figures({k: str(v) for k, v in CORRECTION.items()}, prefix="correction/")
    # dtype auto: fp32 master weights, bf16 autocast (the trainer's default); then bf16 weights.
    for name, dtype in (("auto", torch.float32), ("bfloat16", torch.bfloat16)):
        if ctx.left() < 10:
            rec.row("gap", {"dtype": name, "skipped": "no time left"})
            continue
        model = random_lm(shape, dev).eval()
        sharpen(model)
        model.to(dtype)
        batch, clock = rollout(model, rows=rows, prompt=prompt, new=new, seed=1)
        row = {"dtype": name, "sample_tok_s": rows * new / clock.seconds, **compare(model, batch)}
        rec.row("gap", row)
        finite = all(math.isfinite(v) for v in row.values() if isinstance(v, float))
        rec.check(f"{name}/finite", finite, "every figure of the row")
        if dev.type == "cpu" and dtype == torch.float32:  # no autocast: the two passes must agree
            rec.check("cpu_fp32_agree", row["max_abs_diff"] < 1e-3, "max |Δ log p| < 1e-3 in float32")
        else:  # a gross disagreement (a shifted token, a wrong mask) is far beyond bf16 rounding
            rec.check(f"{name}/bounded", abs(row["kl"]) < 0.1, "|KL(rollout ‖ trainer)| < 0.1 nat/token")
        del model
