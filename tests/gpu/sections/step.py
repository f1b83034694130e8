"""A GRPO and a PPO step of randomly initialised models at Qwen2.5-0.5B's and -1.5B's shapes, fp32
master weights with bf16 autocast (``model.dtype: auto``, the trainer's default on a GPU): finite
metrics, peak GPU memory, tokens per second for sampling, the old-log-prob pass and the update, and
what the chunked LM head and gradient checkpointing change.

Per shape the model samples one rollout batch (``tests.gpu.shapes.rollout``); each variant then
recomputes the old log-probs (and PPO's values), computes the advantages and takes two updates with
a fresh AdamW (the second one timed: the first allocates Adam's moments), exactly as
``Trainer.train_step`` phases 4–6 do (``agentrl.train.update``).
"""

from __future__ import annotations

import gc
import math

import torch

from tests.gpu.report import Recorder
from tests.gpu.shapes import add_rewards, floor_seconds, gib, measure, n_params, random_lm, rollout

TITLE = "GRPO and PPO steps at 0.5B and 1.5B shapes: memory, tokens/s, chunked head, checkpointing"
BUDGET_S = 130.0

# (algorithm, logits_chunk_tokens, gradient checkpointing) per shape; the 1.5B runs where memory allows.
VARIANTS = {
    "0.5B": [("grpo", 256, False), ("grpo", 0, False), ("grpo", 256, True), ("ppo", 256, False)],
    "1.5B": [("grpo", 256, True), ("ppo", 256, True)],
}
GROUP = 4


def _variant(model, batch, groups, algo: str, chunk: int, ckpt: bool, dev) -> dict:  # type: ignore[no-untyped-def]
    from agentrl.learn.algorithm import AlgorithmConfig
    from agentrl.learn.forward import set_logits_chunk
    from agentrl.learn.memory import enable_checkpointing
    from agentrl.learn.models import ValueModel
    from agentrl.train.update import (
        chunked_forward,
        compute_advantages,
        forward_logprobs,
        forward_values,
        update_actor,
        update_critic,
    )

    rows = batch["input_ids"].shape[0]
    tokens = int(batch["attention_mask"].sum())
    cfg = AlgorithmConfig(name=algo, mini_batch_size=rows)
    set_logits_chunk(model, chunk)
    enable_checkpointing(model) if ckpt else model.gradient_checkpointing_disable()
    batch = dict(batch)
    with measure(dev) as old:
        batch["old_logprobs"] = chunked_forward(
            lambda mb: forward_logprobs(model, mb, policy_only=True)[0], batch, cfg.micro_batch_tokens
        )
    critic = critic_opt = None
    if algo == "ppo":
        critic = ValueModel.from_policy(model).to(dev)
        critic_opt = torch.optim.AdamW(critic.parameters(), lr=1e-6, weight_decay=0.0)
        batch["values"] = chunked_forward(
            lambda mb: forward_values(critic, mb), batch, cfg.micro_batch_tokens
        )
    compute_advantages(batch, cfg, groups)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.0)  # moved: by a gradient
    probe = next(p for p in model.parameters() if p.requires_grad)
    before = probe.detach().clone()
    clocks, metrics = [], {}
    for _ in range(2):
        with measure(dev) as c:
            metrics = update_actor(model, opt, batch, cfg)
            if critic is not None:
                metrics |= update_critic(critic, critic_opt, batch, cfg)
        clocks.append(c)
    moved = not torch.equal(before, probe.detach())
    keys = ["actor/pg_loss", "actor/grad_norm", "actor/entropy"] + (["critic/vf_loss"] if critic else [])
    peaks = [c.peak_bytes for c in clocks if c.peak_bytes is not None]
    row = {
        "algo": algo, "chunk": chunk, "grad_ckpt": ckpt,
        "old_logprob_tok_s": tokens / old.seconds,
        "update_s": clocks[1].seconds, "update_tok_s": tokens / clocks[1].seconds,
        "peak_gib": gib(max(peaks)) if peaks else None,
        "finite": all(math.isfinite(metrics[k]) for k in keys), "weights_moved": moved,
        **{k.split("/")[1]: metrics[k] for k in keys},
    }  # fmt: skip
    opt = critic = critic_opt = batch = None  # free them before the next variant
    model.zero_grad(set_to_none=True)
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return row


def _grown(clock, dev) -> float | None:  # type: ignore[no-untyped-def]
    """GiB allocated during a measured region and still held at its end (the model just built)."""
    return None if clock.start_bytes is None else gib(torch.cuda.memory_allocated(dev) - clock.start_bytes)


def run(ctx, rec: Recorder) -> None:  # type: ignore[no-untyped-def]
    dev = ctx.device
    rows, prompt, new = (16, 512, 256) if not ctx.dry_run else (2 * 2, 8, 6)
    group = GROUP if not ctx.dry_run else 2
    rec.figures({"rows": rows, "prompt_tokens": prompt, "new_tokens": new, "group_size": group})
    for name, variants in VARIANTS.items():
        shape = ctx.shape(name)
        try:
            with measure(dev) as built:
                model = random_lm(shape, dev)
            rollout(model, rows=rows, prompt=8, new=2, seed=99)  # warm-up: kernels, handles
            batch, sampled = rollout(model, rows=rows, prompt=prompt, new=new)
            floor_s = floor_seconds(model, rows=rows, prompt=prompt, new=new)
            groups = add_rewards(batch, group)
            rec.row("sampling", {
                "shape": name, "model": shape, "params_m": n_params(model) / 1e6, "weights_gib": _grown(built, dev),
                "sample_s": sampled.seconds, "sample_tok_s": rows * new / sampled.seconds,
                "sample_peak_gib": gib(sampled.peak_bytes), "floor_tok_s": rows * new / floor_s,
                "share_of_floor": floor_s / sampled.seconds,
            })  # fmt: skip
            for algo, chunk, ckpt in variants:
                if ctx.left() < 15:
                    rec.row("steps", {"shape": name, "algo": algo, "chunk": chunk, "grad_ckpt": ckpt,
                                      "skipped": "no time left"})  # fmt: skip
                    continue
                row = _variant(model, batch, groups, algo, chunk, ckpt, dev)
                rec.row("steps", {"shape": name, **row})
                rec.check(f"{name}/{algo}/chunk{chunk}/ckpt{int(ckpt)}", row["finite"] and row["weights_moved"],
                          "finite losses and grad norm; the weights moved")  # fmt: skip
        except torch.cuda.OutOfMemoryError as e:
            rec.row("steps", {"shape": name, "skipped": f"out of memory: {str(e).splitlines()[0][:160]}"})
            if name == "0.5B":
                raise
        finally:
            model = batch = None
            gc.collect()
            if dev.type == "cuda":
                torch.cuda.empty_cache()
    _savings(rec)


def _savings(rec: Recorder) -> None:
    """What the chunked LM head and gradient checkpointing change at 0.5B, from the table's rows."""
    rows = {(r["algo"], r.get("chunk"), r.get("grad_ckpt")): r for r in rec.result.tables.get("steps", [])
            if r["shape"] == "0.5B" and "update_s" in r}  # fmt: skip
    base, whole, ckpt = (
        rows.get(("grpo", 256, False)),
        rows.get(("grpo", 0, False)),
        rows.get(("grpo", 256, True)),
    )
    if base and whole and base["peak_gib"] is not None:
        rec.figure("lm_head_chunk_saving_gib", whole["peak_gib"] - base["peak_gib"])
    if base and ckpt:
        if base["peak_gib"] is not None:
            rec.figure("grad_ckpt_saving_gib", base["peak_gib"] - ckpt["peak_gib"])
        rec.figure("grad_ckpt_time_ratio", ckpt["update_s"] / base["update_s"])
