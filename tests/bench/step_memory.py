"""Peak memory of one GRPO update step with the LM head chunked over tokens (``model.logits_chunk_tokens``)
against the head on all the policy's tokens at once (``logits_chunk_tokens: 0``) and against the full
pass that builds the [B, T, V] logits of every position (``policy_only=False``, the path before both).

    OMP_NUM_THREADS=2 python -m tests.bench.step_memory [--layers 30] [--vocab 49152 151936]
        [--rows 16] [--prompt 304] [--new 96] [--modes full 0 256] [--gradient-checkpointing]
        [--trainable-layers N]

A random llama-architecture model with SmolLM2-135M's shapes (hidden 576, 9 heads, 3 kv heads,
intermediate 1536, tied embeddings; ``--layers`` of them, 30 in SmolLM2) built from a LlamaConfig
(no download), at SmolLM2's vocabulary (49,152) and Qwen's (151,936). The step is the trainer's
``update_actor`` (GRPO: one epoch, one mini-batch of all rows, micro-batches of the default 4,096
tokens, AdamW) on 4 tasks × 4 samples = 16 rows of a prompt plus 96 policy tokens. Each case runs in
its own process, so its peak RSS (``ru_maxrss``) is its own; the model alone (weights, gradients and
AdamW's two moments: ``model MB``) is measured in the same process before the step.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def _case(vocab: int, mode: str, a: argparse.Namespace) -> dict:
    import resource

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from agentrl.learn.algorithm import AlgorithmConfig
    from agentrl.learn.forward import set_logits_chunk
    from agentrl.train import update

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=vocab, hidden_size=576, intermediate_size=1536, num_hidden_layers=a.layers,
        num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048,
        tie_word_embeddings=True,
    )  # fmt: skip
    model = LlamaForCausalLM(cfg)
    if a.trainable_layers:  # as model.trainable_layers: N does in the trainer
        from agentrl.learn.models import train_last_layers

        train_last_layers(model, a.trainable_layers)
    if a.gradient_checkpointing:  # as model.gradient_checkpointing: true does in the trainer
        from agentrl.learn.memory import enable_checkpointing

        enable_checkpointing(model)
    if mode == "full":  # every position through the head, as before policy_only
        full = update.forward_logprobs

        def forward_all(*args, **kw):
            return full(*args, **{**kw, "policy_only": False})

        update.forward_logprobs = forward_all
    else:
        set_logits_chunk(model, int(mode))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6)
    rows, length = a.rows, a.prompt + a.new
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (rows, length), generator=g)
    mask = torch.zeros(rows, length, dtype=torch.long)
    mask[:, a.prompt :] = 1
    adv = torch.randn(rows, 1, generator=g).expand(rows, length) * mask
    batch = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "position_ids": torch.arange(length).expand(rows, -1).contiguous(),
        "loss_mask": mask,
        "advantages": adv.contiguous(),
        "old_logprobs": torch.full((rows, length), -10.0) * mask,
    }
    # The model's own memory: weights, gradients, AdamW's moments (a step on zero gradients allocates them).
    for p in model.parameters():
        if p.requires_grad:
            p.grad = torch.zeros_like(p)
    opt.step()
    opt.zero_grad(set_to_none=True)
    model_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    algo = AlgorithmConfig(name="grpo", mini_batch_size=rows, micro_batch_tokens=a.micro_batch_tokens)
    t0 = time.perf_counter()
    m = update.update_actor(model, opt, batch, algo, temperature=1.0, norm=length)
    seconds = time.perf_counter() - t0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": seconds, "peak_rss_mb": rss_mb, "model_mb": model_mb, "pg_loss": m["actor/pg_loss"]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--vocab", type=int, nargs="*", default=[49152, 151936])
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=304)
    ap.add_argument("--new", type=int, default=96)
    ap.add_argument("--modes", nargs="*", default=["full", "0", "256"], help="'full' or a chunk size")
    ap.add_argument("--micro-batch-tokens", type=int, default=4096)
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--trainable-layers", type=int, default=0, help="train only the last N layers (0: all)")
    ap.add_argument("--case", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.case:
        vocab, mode = a.case.split(":")
        print(json.dumps(_case(int(vocab), mode, a)))
        return
    print(
        f"GRPO update step: {a.rows} rows x ({a.prompt} prompt + {a.new} policy tokens), {a.layers} layers,"
        f" micro-batches of {a.micro_batch_tokens} tokens"
        f"{', gradient checkpointing' if a.gradient_checkpointing else ''}"
        f"{f', last {a.trainable_layers} layers trained' if a.trainable_layers else ''}; peak RSS in MB"
    )
    print(f"{'vocab':>8} {'chunk':>6} {'model MB':>9} {'peak MB':>8} {'step s':>7} {'pg_loss':>9}")
    for vocab in a.vocab:
        for chunk in a.modes:
            cmd = [sys.executable, "-m", "tests.bench.step_memory", "--case", f"{vocab}:{chunk}"]
            for k in ("layers", "rows", "prompt", "new"):
                cmd += [f"--{k}", str(getattr(a, k))]
            cmd += ["--micro-batch-tokens", str(a.micro_batch_tokens)]
            cmd += ["--gradient-checkpointing"] if a.gradient_checkpointing else []
            cmd += ["--trainable-layers", str(a.trainable_layers)]
            run = subprocess.run(cmd, capture_output=True, text=True)
            if run.returncode != 0:  # killed: out of memory on this machine
                print(f"{vocab:>8} {chunk:>6} failed (rc {run.returncode}): {run.stderr.strip()[-200:]}")
                continue
            r = json.loads(run.stdout.strip().splitlines()[-1])
            print(
                f"{vocab:>8} {chunk:>6} {r['model_mb']:>9.0f} {r['peak_rss_mb']:>8.0f}"
                f" {r['seconds']:>7.1f} {r['pg_loss']:>9.4f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
