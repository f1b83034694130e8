"""The quickstart's RL step on quiet cores and beside a busy process (issue 37, item 4).

    python -m tests.bench.busy_step [--set KEY=VALUE] [--runs 1] [--out runs/bench-busy]

Runs ``agentrl train examples/quickstart.yaml --set steps=8 --set sft_steps=20`` (evaluation off) in a
child process, first alone, then beside a second process that multiplies 384 x 384 matrices on 2
torch threads at the same priority (what a judge server, an editor's indexer or a second run does
to a shared 2-core machine), ``--runs`` times each, alternating. Prints, per setting, the median over
RL steps 3-8 of the step, rollout and update seconds (``timing_s/*`` in ``metrics.jsonl``) and the
busy/quiet ratio. ``--set rollout.sampling_threads=2`` measures sampling on both threads (before
``auto``); every ``--set`` goes to both runs. OMP_NUM_THREADS is the caller's (2 on a 2-core machine).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

BUSY = (
    "import torch, time\n"
    "torch.set_num_threads(2)\n"
    "a = torch.randn(384, 384)\n"
    "while True:\n"
    "    a = torch.tanh(a @ a)\n"
)
KEYS = ("timing_s/step", "timing_s/rollout", "timing_s/update")


def run(out: Path, sets: list[str], steps: int = 8, sft_steps: int = 20) -> dict[str, float]:
    cmd = [
        sys.executable, "-m", "agentrl", "train", "examples/quickstart.yaml", "--set", f"steps={steps}",
        "--set", f"sft_steps={sft_steps}", "--set", "eval.before_train=false", "--set", "eval.at_end=false",
        "--set", f"output_dir={out}", "--overwrite", "--no-progress",
    ]  # fmt: skip
    for s in sets:
        cmd += ["--set", s]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])
    if done.returncode != 0:
        sys.exit(f"training failed: {done.stderr.strip().splitlines()[-1:]}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r.get("step", 0) >= min(3, steps)]  # steps 1-2 warm up
    return {k: statistics.median(r[k] for r in rows) for k in KEYS}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--out", default="runs/bench-busy")
    ap.add_argument("--steps", type=int, default=8, help="RL steps a run (the median is of steps 3 on)")
    ap.add_argument("--sft-steps", type=int, default=20)
    args = ap.parse_args(argv)
    quiet: list[dict[str, float]] = []
    busy: list[dict[str, float]] = []
    for i in range(args.runs):
        quiet.append(run(Path(args.out) / f"quiet{i}", args.set, args.steps, args.sft_steps))
        neighbour = subprocess.Popen([sys.executable, "-c", BUSY], env={**os.environ, "OMP_NUM_THREADS": "2"})
        try:
            busy.append(run(Path(args.out) / f"busy{i}", args.set, args.steps, args.sft_steps))
        finally:
            neighbour.kill()
            neighbour.wait()
    from agentrl.train.research_base import cpu_name

    print(f"{cpu_name()}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, --set {args.set or 'none'}")
    print("| run | cores | step s | rollout s | update s |\n|---|---|---:|---:|---:|")
    for i in range(args.runs):
        for name, r in (("quiet", quiet[i]), ("busy", busy[i])):
            print(f"| {i} | {name} | " + " | ".join(f"{r[k]:.2f}" for k in KEYS) + " |")
    ratios = [b["timing_s/step"] / q["timing_s/step"] for q, b in zip(quiet, busy, strict=True)]
    print(f"busy / quiet step: {', '.join(f'{x:.2f}' for x in ratios)}")


if __name__ == "__main__":
    main()
