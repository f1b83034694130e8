"""What the GPU kit's sections measure on: randomly initialised Qwen2-architecture models at realistic
shapes, a rollout batch sampled from them with the trainer's own sampler, and the clock and memory
readings around a measured region.

``SHAPES`` holds Qwen2.5-0.5B's and Qwen2.5-1.5B's sizes (151,936-token vocabulary, tied embeddings)
and the tiny ``dry`` shapes the CPU dry run uses in their place. ``rollout`` samples a batch with
``agentrl.sampling.generate.sample_batch`` (KV cache, bf16 autocast on a GPU) and lays it out as the
trainer's [B, T] batch, with the sampler's log-probs in ``rollout_logprobs``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

__all__ = [
    "SHAPES",
    "Clock",
    "add_rewards",
    "gib",
    "layout",
    "measure",
    "n_params",
    "random_lm",
    "rollout",
    "sync",
]

SHAPES: dict[str, dict[str, int]] = {
    # Qwen2.5-0.5B and -1.5B (their config.json), randomly initialised.
    "0.5B": dict(vocab=151936, hidden=896, intermediate=4864, layers=24, heads=14, kv_heads=2),
    "1.5B": dict(vocab=151936, hidden=1536, intermediate=8960, layers=28, heads=12, kv_heads=2),
    # The dry run's stand-ins: every code path, seconds on a CPU.
    "dry": dict(vocab=512, hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2),
    "dry-2": dict(vocab=640, hidden=64, intermediate=128, layers=3, heads=4, kv_heads=2),
}


def random_lm(
    shape: str,
    device: torch.device,
    *,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
    attn: str = "sdpa",
    vocab: int | None = None,
) -> torch.nn.Module:
    """A randomly initialised Qwen2 causal LM of ``SHAPES[shape]`` (``vocab`` replacing its vocabulary
    size when given), built directly on ``device`` (initialising 1.5B parameters on a CPU first would
    take most of a section's budget)."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    s = SHAPES[shape]
    cfg = Qwen2Config(
        vocab_size=vocab or s["vocab"], hidden_size=s["hidden"], intermediate_size=s["intermediate"],
        num_hidden_layers=s["layers"], num_attention_heads=s["heads"], num_key_value_heads=s["kv_heads"],
        max_position_embeddings=4096, tie_word_embeddings=True, rope_theta=1_000_000.0,
    )  # fmt: skip
    cfg._attn_implementation = attn
    with torch.random.fork_rng(devices=[]), torch.device(device):
        torch.manual_seed(seed)
        if device.type == "cuda":
            torch.cuda.manual_seed(seed)
        return AutoModelForCausalLM.from_config(cfg, dtype=dtype)


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def gib(nbytes: float | None) -> float | None:
    return None if nbytes is None else nbytes / 2**30


@dataclass
class Clock:
    """A measured region: ``seconds`` (the GPU synchronised at both ends) and, on a GPU, the peak
    memory allocated inside it (``peak_bytes``, from a reset at its start) and at its start."""

    seconds: float = 0.0
    peak_bytes: int | None = None
    start_bytes: int | None = None


@contextmanager
def measure(device: torch.device) -> Iterator[Clock]:
    """Time the block and read the peak GPU memory allocated during it (None on a CPU)."""
    clock = Clock()
    sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        clock.start_bytes = torch.cuda.memory_allocated(device)
    t0 = time.perf_counter()
    yield clock
    sync(device)
    clock.seconds = time.perf_counter() - t0
    if device.type == "cuda":
        clock.peak_bytes = torch.cuda.max_memory_allocated(device)


def rollout_prompts(vocab: int, rows: int, prompt: int, seed: int) -> list[list[int]]:
    """``rollout``'s prompts: a row in four of ``prompt`` ids, the others ⅛, ¼ or ⅜ shorter."""
    g = torch.Generator().manual_seed(seed)
    lens = [prompt - (i % 4) * (prompt // 8) for i in range(rows)]
    return [torch.randint(0, vocab, (n,), generator=g).tolist() for n in lens]


def floor_seconds(model: torch.nn.Module, *, rows: int, prompt: int, new: int, seed: int = 0) -> float:
    """Seconds of the sampling floor on ``rollout``'s prompts: one prefill and ``new`` - 1 bare decode
    steps through a preallocated cache (``tests.bench.sampling.floor``, under the sampler's autocast)."""
    from tests.bench.sampling import floor

    device = next(model.parameters()).device
    return floor(model, rollout_prompts(model.config.vocab_size, rows, prompt, seed), new, str(device))


def rollout(
    model: torch.nn.Module, *, rows: int, prompt: int, new: int, seed: int = 0
) -> tuple[dict[str, torch.Tensor], Clock]:
    """Sample ``new`` tokens after ``rows`` random prompts of up to ``prompt`` ids (a row in four has
    the full length, the others ⅛, ¼ or ⅜ less, so the sampler left-pads and the trainer right-pads
    as in a real batch; no stop token, so every row samples ``new``) and lay them out as the
    trainer's batch: ``input_ids``, ``attention_mask``, ``position_ids``, ``loss_mask`` (1 on the
    sampled tokens) and ``rollout_logprobs`` (the sampler's log-probs there, 0 elsewhere), all
    [rows, prompt + new] on the model's device. Returns the batch and the sampling's clock."""
    from agentrl.sampling.generate import sample_batch

    device = next(model.parameters()).device
    prompts = rollout_prompts(model.config.vocab_size, rows, prompt, seed)
    with measure(device) as clock:
        samples = sample_batch(
            model, prompts, seeds=[seed * 1000 + i for i in range(rows)], stop_ids=set(), pad_id=0,
            max_new_tokens=new,
        )  # fmt: skip
    ids, lps = [s.token_ids for s in samples], [s.logprobs for s in samples]
    return layout(prompts, ids, lps, device), clock


def layout(
    prompts: list[list[int]], sampled: list[list[int]], logprobs: list[list[float]], device: torch.device
) -> dict[str, torch.Tensor]:
    """Prompts and their sampled ids (with the sampler's log-probs) as the trainer's right-padded
    [B, T] batch on ``device``: ``input_ids``, ``attention_mask``, ``position_ids``, ``loss_mask``
    (1 on the sampled ids) and ``rollout_logprobs`` (0 off them)."""
    rows, T = len(prompts), max(len(p) + len(s) for p, s in zip(prompts, sampled, strict=True))
    batch = {k: torch.zeros(rows, T, dtype=torch.long) for k in ("input_ids", "attention_mask", "loss_mask")}
    batch["position_ids"] = torch.arange(T).expand(rows, -1).clone()
    batch["rollout_logprobs"] = torch.zeros(rows, T)
    for i, (p, s, lp) in enumerate(zip(prompts, sampled, logprobs, strict=True)):
        n = len(p) + len(s)
        batch["input_ids"][i, :n] = torch.tensor(p + s)
        batch["attention_mask"][i, :n] = 1
        batch["loss_mask"][i, len(p) : n] = 1
        batch["rollout_logprobs"][i, len(p) : n] = torch.tensor(lp, dtype=torch.float32)
    return {k: v.to(device) for k, v in batch.items()}


def add_rewards(batch: dict[str, torch.Tensor], group_size: int, seed: int = 0) -> list[int]:
    """Put a random reward in [0, 1] on each row's last policy token (``token_level_scores``), all
    different, so every group's advantages are non-zero; returns the rows' group ids."""
    rows = batch["input_ids"].shape[0]
    g = torch.Generator().manual_seed(seed)
    scores = torch.zeros(batch["loss_mask"].shape, dtype=torch.float32)
    last = batch["loss_mask"].shape[1] - 1 - batch["loss_mask"].flip(-1).argmax(-1).cpu()
    scores[torch.arange(rows), last] = torch.rand(rows, generator=g)
    batch["token_level_scores"] = scores.to(batch["input_ids"].device)
    return [i // group_size for i in range(rows)]
