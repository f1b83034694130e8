"""Where an update's time goes: one GRPO ``update_actor`` call, split into the frozen layers' forward,
the trained layers' forward, the LM head and loss, the backward pass and the optimiser step.

    OMP_NUM_THREADS=2 python -m tests.bench.update_profile [--model DIR] [--layers 30]
        [--trainable-layers 8] [--rows 12] [--prompt 1100] [--new 200] [--micro-batch-tokens 4096]
        [--repeats 2]

``--model``: a transformers directory (SmolLM2-135M-Instruct imported with ``agentrl model
import-gguf``); without it, a random llama with SmolLM2-135M's shapes (hidden 576, 9 heads, 3 kv
heads, intermediate 1536, vocabulary 49,152, tied embeddings, ``--layers`` layers). The batch is
``--rows`` rows of a prompt and ``--new`` policy tokens (random ids, random advantages), the step
the trainer's (``agentrl.train.update.update_actor``: GRPO, one mini-batch of every row, the
micro-batches of ``--micro-batch-tokens``, AdamW, the policy's positions alone through the head in
chunks). The parts are timed by forward hooks on the decoder layers and by wrapping the backward
call and the optimiser's step; the first call is a warm-up, the table shows the mean of the others.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from typing import Any


def _model(a: argparse.Namespace) -> Any:
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    if a.model:
        return AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    cfg = LlamaConfig(
        vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=a.layers,
        num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048,
        tie_word_embeddings=True,
    )  # fmt: skip
    return LlamaForCausalLM(cfg)


class Clock:
    """Seconds spent in named parts, from hooks and wrappers."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._open: dict[int, float] = {}

    def hook_layers(self, layers: Any, trained_from: int) -> None:
        for i, layer in enumerate(layers):
            part = "forward: trained layers" if i >= trained_from else "forward: frozen layers"
            layer.register_forward_pre_hook(lambda m, args, part=part: self._start(m))
            layer.register_forward_hook(lambda m, args, out, part=part: self._stop(m, part))

    def _start(self, module: Any) -> None:
        self._open[id(module)] = time.perf_counter()

    def _stop(self, module: Any, part: str) -> None:
        self.seconds[part] += time.perf_counter() - self._open.pop(id(module))

    def wrap(self, fn: Any, part: str) -> Any:
        def timed(*args: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                self.seconds[part] += time.perf_counter() - t0

        return timed


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--model", default=None, help="a transformers directory (default: a random SmolLM2-shaped llama)"
    )
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--trainable-layers", type=int, default=8)
    ap.add_argument("--rows", type=int, default=12)
    ap.add_argument("--prompt", type=int, default=1100)
    ap.add_argument("--new", type=int, default=200)
    ap.add_argument("--micro-batch-tokens", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=2, help="timed calls after the warm-up")
    a = ap.parse_args(argv)

    import torch

    from agentrl.learn.algorithm import AlgorithmConfig
    from agentrl.learn.models import train_last_layers
    from agentrl.train import update

    model = _model(a)
    layers = model.model.layers
    if a.trainable_layers:
        train_last_layers(model, a.trainable_layers)
    trained_from = len(layers) - a.trainable_layers if a.trainable_layers else 0
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-7)
    vocab = model.config.vocab_size
    rows, length = a.rows, a.prompt + a.new
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (rows, length), generator=g)
    mask = torch.zeros(rows, length, dtype=torch.long)
    mask[:, a.prompt :] = 1
    batch = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "position_ids": torch.arange(length).expand(rows, -1).contiguous(),
        "loss_mask": mask,
        "advantages": (torch.randn(rows, 1, generator=g).expand(rows, length) * mask).contiguous(),
        "old_logprobs": torch.full((rows, length), -10.0) * mask,
    }
    algo = AlgorithmConfig(name="grpo", mini_batch_size=rows, micro_batch_tokens=a.micro_batch_tokens)

    clock = Clock()
    clock.hook_layers(layers, trained_from)
    opt.step = clock.wrap(opt.step, "optimiser step")  # type: ignore[method-assign]
    backward = torch.Tensor.backward
    torch.Tensor.backward = clock.wrap(backward, "backward")  # type: ignore[method-assign]
    totals = []
    try:
        for k in range(a.repeats + 1):
            if k == 1:
                clock.seconds.clear()
            t0 = time.perf_counter()
            update.update_actor(model, opt, batch, algo, temperature=1.0, norm=length)
            if k:
                totals.append(time.perf_counter() - t0)
    finally:
        torch.Tensor.backward = backward  # type: ignore[method-assign]
    n = len(totals)
    total = sum(totals) / n
    parts = {k: v / n for k, v in clock.seconds.items()}
    layer_s = parts.get("forward: frozen layers", 0.0) + parts.get("forward: trained layers", 0.0)
    parts["forward: embeddings, head, loss, the rest"] = (
        total - layer_s - parts.get("backward", 0.0) - parts.get("optimiser step", 0.0)
    )
    print(
        f"update_actor: {rows} rows x ({a.prompt} + {a.new} policy tokens), {len(layers)} layers "
        f"({a.trainable_layers or len(layers)} trained, {sum(p.numel() for p in params) / 1e6:.1f}M "
        f"parameters), micro-batches of {a.micro_batch_tokens} tokens, torch threads "
        f"{torch.get_num_threads()}; mean of {n} calls"
    )
    print(f"{'part':<44} {'seconds':>8} {'share':>6}")
    for part, s in sorted(parts.items(), key=lambda kv: -kv[1]):
        print(f"{part:<44} {s:>8.2f} {s / total:>6.1%}")
    print(f"{'total':<44} {total:>8.2f}")


if __name__ == "__main__":
    main()
