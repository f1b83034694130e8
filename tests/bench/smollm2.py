"""SmolLM2-135M-Instruct before and after ``examples/smollm2`` on a CPU, on companies training never saw:
the figures of BENCHMARKS.md and the example's README.

    OMP_NUM_THREADS=2 python -m tests.bench.smollm2 [--model models/smollm2-135m] [--out runs/bench-smollm2] \\
        [--set KEY=VALUE] [--limit N] [--samples 2] [--max-tokens 128]

Runs the example's commands (``examples/smollm2/README.md``): the training run, whose own
evaluations (``eval:`` in the config) score the held-out split of ``examples/smollm2-env`` before RL
(the warm start) and after the last step, same tasks and seeds, with the paired gain; and an
evaluation of the imported model on the same split (``agentrl rollout``, the evaluations' seeds and
temperature). Prints a markdown table (held-out mean normalised reward with its 95% interval, the
share of episodes with a tool call, the official share of opened pages), the paired gain, the run's
wall time and peak RSS (its ``peak_rss_mb``), and its ``summary.json``. Needs the imported model (``agentrl model
import-gguf``); about 45 minutes on two quiet cores. ``--set`` (training config overrides),
``--limit`` (the first N held-out tasks, every evaluation), ``--samples`` (per task) and
``--max-tokens`` (the imported model's evaluation) shrink the same command sequence for a smoke test.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

CONFIG = "examples/smollm2/smollm2.yaml"
EVAL = [
    "--suite", "examples/smollm2-env", "--split", "heldout", "--temperature", "0.7", "--concurrency", "12",
    "--device", "cpu", "--no-progress",
]  # fmt: skip


def _agentrl(*args: str) -> tuple[str, float]:
    """Run one agentrl command; its stdout and wall seconds."""
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "agentrl", *args], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"agentrl {' '.join(args)} failed: {r.stderr.strip().splitlines()[-1:]}")
    return r.stdout, wall


def _summary(stdout: str) -> dict:
    return json.loads(stdout[stdout.index("{") :])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="models/smollm2-135m")
    ap.add_argument("--out", default="runs/bench-smollm2")
    ap.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a training config override"
    )
    ap.add_argument("--limit", type=int, help="evaluate the first N held-out tasks (default: all 33)")
    ap.add_argument("--samples", type=int, default=2, help="evaluation samples per task")
    ap.add_argument(
        "--max-tokens", type=int, default=128, help="the imported model's evaluation: new tokens per turn"
    )
    args = ap.parse_args(argv)
    out = Path(args.out)
    run = out / "run"
    sets = [f"model.path={args.model}", f"eval.n={args.samples}", *args.set]
    sets += [f"eval.limit={args.limit}"] if args.limit else []
    _, train_s = _agentrl(
        "train",
        CONFIG,
        "--no-progress",
        *(x for kv in sets for x in ("--set", kv)),
        "--set",
        f"output_dir={run}",
    )
    summary = json.loads((run / "summary.json").read_text())
    evals = [*EVAL, "-n", str(args.samples), "--max-tokens", str(args.max_tokens)]
    evals += ["--limit", str(args.limit)] if args.limit else []
    imported = _summary(
        _agentrl("rollout", "--policy", f"hf:{args.model}", *evals, "--out", str(out / "imported.jsonl"))[0]
    )
    f = "{:.3f}".format
    print(
        "| model | held-out mean normalised reward [95% CI] | episodes with a tool call | official share of opened pages |"
    )
    print("|---|---|---|---|")
    share = lambda x: "-" if x is None else f"{x:.0%}"  # noqa: E731
    print(
        f"| imported | {f(imported['mean_normalized_reward'])} | {imported['tool_call_episodes']:.0%} "
        f"| {share(imported['official_share'])} |"
    )
    for name, key in (
        ("warm start (before RL)", "eval_before"),
        ("warm start + GRPO (after RL)", "eval_after"),
    ):
        e = summary[key]
        r = e["reward"]
        print(
            f"| {name} | {f(r['mean'])} [{f(r['low'])}, {f(r['high'])}] | {e['tool_call_episodes']:.0%} "
            f"| {share(e.get('official_share'))} |"
        )
    g = summary["eval_gain"]["difference"]
    print(
        f"\nRL's paired held-out gain: {g['mean']:+.3f} [{g['low']:+.3f}, {g['high']:+.3f}] over "
        f"{summary['eval_after']['tasks']} tasks × {args.samples}"
    )
    print(f"training run: {train_s / 60:.1f} min wall, peak RSS {summary['peak_rss_mb'] / 1024:.1f} GiB")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
