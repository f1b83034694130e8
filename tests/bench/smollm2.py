"""SmolLM2-135M-Instruct before and after ``examples/smollm2`` on a CPU: the figures of BENCHMARKS.md.

    OMP_NUM_THREADS=2 python -m tests.bench.smollm2 [--model models/smollm2-135m] [--out runs/bench-smollm2] \\
        [--set KEY=VALUE] [--limit N] [--samples 2] [--max-tokens 128]

Runs the example's commands (``examples/smollm2/README.md``) and one more: an evaluation of the
imported model, the training run (wall time and peak RSS of the process), a warm-start-only run
(``--set steps=0``: what the warm start alone reaches) and the same evaluation of both checkpoints
— 33 tasks × 2 samples at the training temperature, same seeds. Prints a markdown table of
``mean_normalized_reward``, ``tool_call_episodes`` and ``official_share`` per model, and the run's
``summary.json``. Needs the imported model (``agentrl model import-gguf``); about 45 minutes on two
quiet cores. ``--set`` (training config overrides, both runs), ``--limit`` (the first N tasks),
``--samples`` and ``--max-tokens`` (of the evaluations) shrink the same command sequence for a smoke test.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

CONFIG = "examples/smollm2/smollm2.yaml"
EVAL = [
    "--suite", "examples/quickstart-env", "--temperature", "0.7", "--concurrency", "12", "--device", "cpu",
    "--no-progress",
]  # fmt: skip


def _agentrl(*args: str) -> tuple[str, float, float]:
    """Run one agentrl command; its stdout, wall seconds and the peak RSS (GB) of its process tree."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "agentrl", *args], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"agentrl {' '.join(args)} failed: {r.stderr.strip().splitlines()[-1:]}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return r.stdout, wall, max(peak, before) / 2**20


def _summary(stdout: str) -> dict:
    return json.loads(stdout[stdout.index("{") :])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="models/smollm2-135m")
    ap.add_argument("--out", default="runs/bench-smollm2")
    ap.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a training config override"
    )
    ap.add_argument("--limit", type=int, help="evaluate the first N tasks (default: all 33)")
    ap.add_argument("--samples", type=int, default=2, help="evaluation samples per task")
    ap.add_argument("--max-tokens", type=int, default=128, help="evaluation: new tokens per turn")
    args = ap.parse_args(argv)
    out = Path(args.out)
    run, warm = out / "run", out / "warm-start-only"
    sets = [x for kv in [f"model.path={args.model}", *args.set] for x in ("--set", kv)]
    _, train_s, train_gb = _agentrl("train", CONFIG, "--no-progress", *sets, "--set", f"output_dir={run}")
    _agentrl("train", CONFIG, "--no-progress", *sets, "--set", "steps=0", "--set", f"output_dir={warm}")
    evals = [*EVAL, "-n", str(args.samples), "--max-tokens", str(args.max_tokens)]
    evals += ["--limit", str(args.limit)] if args.limit else []
    rows = []
    for name, policy in (("imported", args.model), ("warm start only", warm), ("warm start + GRPO", run)):
        stdout, wall, _ = _agentrl(
            "rollout", "--policy", f"hf:{policy}", *evals, "--out", str(out / f"{name}.jsonl")
        )
        s = _summary(stdout)
        rows.append((name, s["mean_normalized_reward"], s["tool_call_episodes"], s["official_share"], wall))
    print(
        "| model | mean normalised reward | episodes with a tool call | official share of opened pages | eval s |"
    )
    print("|---|---|---|---|---|")
    for name, reward, tools, official, wall in rows:
        share = "-" if official is None else f"{official:.0%}"
        print(f"| {name} | {reward:.3f} | {tools:.0%} | {share} | {wall:.0f} |")
    print(f"\ntraining run: {train_s / 60:.1f} min wall, peak RSS {train_gb:.1f} GB")
    print((run / "summary.json").read_text())


if __name__ == "__main__":
    main()
