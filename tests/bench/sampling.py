"""The HF sampler against the model's own decode speed (issue 37): tokens per second of
``agentrl.sampling.generate.sample_batch`` and of a floor, the same model's bare decode loop.

    OMP_NUM_THREADS=2 python -m tests.bench.sampling [--shape quickstart|base|smollm2|qwen-0.5b|all] \\
        [--model DIR] [--repeats 3] [--baseline REF] [--threads N] [--device cpu|cuda]

For each shape: the same model, prompts (B rows of different lengths, left-padded), and T new tokens
in three ways, one after the other, ``--repeats`` times (the best of each is reported):

- ``floor``: one prefill, then T forward passes of one token per row through a KV cache allocated
  once (``agentrl.sampling.decode_cache``), each feeding the same token: the model's arithmetic
  and nothing else (no sampling, no stopping, no bookkeeping).
- ``sampler``: ``sample_batch`` at temperature 1 with no stop id (every row decodes T tokens).
- ``baseline`` (with ``--baseline REF``): the ``sample_batch`` of ``agentrl/sampling/generate.py`` at
  git revision ``REF``, the same call (the sampler before a change, measured in the same run).

Shapes: ``quickstart`` (``tiny:layers=2,hidden=128,heads=4,kv_heads=2``, 2,048 ids, 32 rows of
~400 tokens, 80 new: a quickstart rollout turn), ``base`` (the quickstart's model since issue 36,
``base:research-tiny``: the same backbone with a copy head, at the same batch) and ``smollm2`` (SmolLM2-135M: the imported model of
``--model`` when given, else a randomly initialised one of its config; 12 rows of ~600 tokens, 64
new: ``examples/smollm2``'s batch). The GPU kit runs the 0.5B/1.5B shapes (``tests/gpu/shapes.py``);
``qwen-0.5b`` is its 0.5B shape here, each way after a warm-up call of its own (not in ``all``).
Prints a markdown table: the prefill's seconds, then for each way the seconds per call, ms per decode
step (the call less the prefill, over the T - 1 steps after it), tokens/s (B × T over the call) and
its share of the floor's speed (floor seconds over its seconds, prefill included).
"""

from __future__ import annotations

import argparse
import importlib.util
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from agentrl.learn.models import forward_context
from agentrl.sampling.decode_cache import preallocate
from agentrl.sampling.generate import _prefill, sample_batch
from agentrl.sampling.kv_cache import cache_kwarg, returned_cache

ROOT = Path(__file__).resolve().parents[2]
SHAPES: dict[str, dict[str, Any]] = {
    "quickstart": {"rows": 32, "prompt": 400, "new": 80},
    "base": {"rows": 32, "prompt": 400, "new": 80},
    "smollm2": {"rows": 12, "prompt": 600, "new": 64},
    "qwen-0.5b": {"rows": 16, "prompt": 512, "new": 128},
}


def build(shape: str, model_dir: str | None, device: str) -> tuple[torch.nn.Module, int]:
    from transformers import AutoModelForCausalLM, LlamaConfig

    from agentrl.learn.models import build_tiny_model

    if shape == "quickstart":
        model = build_tiny_model(2048, "tiny:layers=2,hidden=128,heads=4,kv_heads=2", seed=0)
    elif shape == "base":
        from agentrl.learn.bases import resolve_base
        from agentrl.learn.models import register_model_types

        register_model_types()
        model = AutoModelForCausalLM.from_pretrained(resolve_base("base:research-tiny"))
    elif shape == "qwen-0.5b":  # the GPU kit's 0.5B shape (randomly initialised), outside the kit
        from tests.gpu.shapes import random_lm

        model = random_lm("0.5B", torch.device(device))
    elif model_dir:
        model = AutoModelForCausalLM.from_pretrained(model_dir)
    else:
        cfg = LlamaConfig(
            vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
            num_attention_heads=9, num_key_value_heads=3, tie_word_embeddings=True,
            max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=100000.0,
        )  # fmt: skip
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = AutoModelForCausalLM.from_config(cfg)
    return model.to(device).eval(), int(model.config.vocab_size)


def prompts_for(rows: int, length: int, vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(0)
    return [torch.randint(10, vocab, (length - 9 * i,), generator=g).tolist() for i in range(rows)]


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def floor(model: torch.nn.Module, prompts: list[list[int]], new: int, device: str) -> float:
    """Seconds for one prefill and ``new`` bare decode steps (a preallocated cache, a fixed token)."""
    _sync(device)
    t0 = time.perf_counter()
    with torch.no_grad(), forward_context(model):
        past, _, mask, pos, _ = _prefill(model, prompts, [(0, None)] * len(prompts), 0, device)
        preallocate(past, new)
        width = mask.shape[1]
        mask = torch.cat([mask, mask.new_ones(len(prompts), new)], dim=1)
        token = torch.full((len(prompts), 1), 11, dtype=torch.long, device=device)
        arg = cache_kwarg(model)
        for t in range(new - 1):  # the sampler's call feeds new - 1 tokens after the prefill
            out = model(
                input_ids=token, attention_mask=mask[:, : width + t + 1], position_ids=(pos + t)[:, None],
                use_cache=True, **{arg: past},
            )  # fmt: skip
            past = returned_cache(out)
    _sync(device)
    return time.perf_counter() - t0


def prefill(model: torch.nn.Module, prompts: list[list[int]], device: str) -> float:
    """Seconds of the prefill alone (what every way does first)."""
    _sync(device)
    t0 = time.perf_counter()
    with torch.no_grad(), forward_context(model):
        _prefill(model, prompts, [(0, None)] * len(prompts), 0, device)
    _sync(device)
    return time.perf_counter() - t0


def timed_sample(fn: Any, model: torch.nn.Module, prompts: list[list[int]], new: int, device: str) -> float:
    _sync(device)
    t0 = time.perf_counter()
    fn(model, prompts, seeds=list(range(len(prompts))), stop_ids=set(), pad_id=0, max_new_tokens=new)
    _sync(device)
    return time.perf_counter() - t0


def load_baseline(ref: str) -> Any:
    """``sample_batch`` of ``agentrl/sampling/generate.py`` at git revision ``ref``."""
    src = subprocess.run(
        ["git", "show", f"{ref}:agentrl/sampling/generate.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "baseline_generate.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("baseline_generate", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod.sample_batch


def measure(shape: str, args: argparse.Namespace, baseline: Any) -> dict[str, Any]:
    model, vocab = build(shape, args.model if shape == "smollm2" else None, args.device)
    s = {
        **SHAPES[shape],
        **{k: v for k, v in (("rows", args.rows), ("prompt", args.prompt), ("new", args.new)) if v},
    }
    prompts = prompts_for(s["rows"], s["prompt"], vocab)
    ways = {"prefill": lambda: prefill(model, prompts, args.device),
            "floor": lambda: floor(model, prompts, s["new"], args.device),
            "sampler": lambda: timed_sample(sample_batch, model, prompts, s["new"], args.device)}  # fmt: skip
    if baseline is not None:
        ways["baseline"] = lambda: timed_sample(baseline, model, prompts, s["new"], args.device)
    for fn in ways.values():  # warm-up, untimed
        fn()
    best = {k: min(fn() for _ in range(args.repeats)) for k, fn in ways.items()}
    tokens = s["rows"] * s["new"]
    return {"shape": shape, **s, "seconds": best, "tokens": tokens}


def table(rows: list[dict[str, Any]]) -> str:
    out = [
        "| shape | rows × new tokens | way | s per call | ms per decode step | tokens/s | share of the floor |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        secs = dict(r["seconds"])
        pre = secs.pop("prefill")
        fl = secs["floor"]
        out.append(f"| {r['shape']} | {r['rows']} × {r['prompt']} prompt | prefill | {pre:.3f} | | | |")
        for way, sec in secs.items():
            step = (sec - pre) / (r["new"] - 1) * 1e3  # the decode steps after the prefill
            out.append(
                f"| {r['shape']} | {r['rows']} × {r['new']} | {way} | {sec:.3f} | {step:.1f} "
                f"| {r['tokens'] / sec:,.0f} | {fl / sec:.2f} |"
            )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=[*SHAPES, "all"], default="all")
    ap.add_argument(
        "--model", help="smollm2: an imported SmolLM2 directory (default: its config, random weights)"
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--baseline", help="a git revision whose sampler is measured in the same run")
    ap.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rows", type=int, help="override the shape's rows")
    ap.add_argument("--prompt", type=int, help="override the shape's longest prompt (rows are 9 ids apart)")
    ap.add_argument("--new", type=int, help="override the shape's new tokens")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    baseline = load_baseline(args.baseline) if args.baseline else None
    shapes = [s for s in SHAPES if s != "qwen-0.5b"] if args.shape == "all" else [args.shape]
    rows = [measure(s, args, baseline) for s in shapes]
    from agentrl.train.research_base import cpu_name

    print(f"{cpu_name()} ({platform.machine()}), {torch.get_num_threads()} threads, device {args.device}, "
          f"torch {torch.__version__}, ATEN_CPU_CAPABILITY={torch.backends.cpu.get_cpu_capability()}")  # fmt: skip
    print(table(rows))


if __name__ == "__main__":
    sys.exit(main())
