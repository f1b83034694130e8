"""Peak memory of a whole ``agentrl train`` run, phase by phase: the warm start, and each RL step's
rollout and update, read from the process's resident set every 0.1 s.

    OMP_NUM_THREADS=2 python -m tests.bench.train_memory examples/smollm2/smollm2.yaml \\
        [--steps 2] [--sft-steps 2] [--set model.trainable_layers=0 ...] [--limit-mb 4096]

The run is the config with evaluation off, ``--steps`` RL steps and ``--sft-steps`` warm-start steps
(``--set`` adds the CLI's overrides), in a fresh output directory under a temporary folder. The
phases come from the run's own log: a step's line gives its rollout's seconds, so the samples between
the step's start and start + rollout are its rollout's, the rest (judging, expanding, the update) its
update's. The run's ``summary.json`` records its
own ``peak_rss_mb`` (``ru_maxrss``), which the table's last line shows beside the sampled peak.
``--limit-mb`` makes the bench exit 1 when that peak is over it (issue 38: 4 GB).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

_STEP = re.compile(r"step (\d+)/\d+: .*?rollout ([\d.]+) (s|min)")


def _seconds(value: str, unit: str) -> float:
    return float(value) * (60 if unit == "min" else 1)


def _rss_mb(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS"):
                    return int(line.split()[1]) // 1024
    except OSError:
        return None
    return None


def run(config: str, steps: int, sft_steps: int, sets: list[str]) -> dict:
    """Run the training and return the log's phases with the peak resident set of each, in MB."""
    out = Path(tempfile.mkdtemp(prefix="train-memory-")) / "run"
    cmd = [sys.executable, "-m", "agentrl", "train", config, "--set", f"steps={steps}"]
    for s in [
        f"sft_steps={sft_steps}",
        "eval.before_train=false",
        "eval.at_end=false",
        f"output_dir={out}",
        *sets,
    ]:
        cmd += ["--set", s]
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    samples: list[tuple[float, int]] = []

    def poll() -> None:
        while proc.poll() is None:
            mb = _rss_mb(proc.pid)
            if mb is not None:
                samples.append((time.monotonic() - t0, mb))
            time.sleep(0.1)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    lines: list[tuple[float, str]] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append((time.monotonic() - t0, line.rstrip()))
    proc.wait()
    poller.join()
    if proc.returncode != 0:
        tail = "\n".join(text for _, text in lines[-20:])
        raise SystemExit(f"agentrl train failed (rc {proc.returncode}):\n{tail}")

    def peak(a: float, b: float) -> int:
        """The largest reading in [a, b]; for a phase shorter than the reading interval, the last
        reading before it ended."""
        inside = [mb for t, mb in samples if a <= t <= b]
        before = [mb for t, mb in samples if t <= b]
        return max(inside) if inside else (before[-1] if before else 0)

    phases: list[tuple[str, float, int]] = []
    start = 0.0
    warm_start = None
    for t, text in lines:
        if "warm start:" in text and warm_start is None:
            phases.append(("start-up (data, tokenizer, model)", t, peak(0.0, t)))
            warm_start = t
        if text.startswith("RL steps"):
            if warm_start is not None:
                phases.append(("warm start", t - warm_start, peak(warm_start, t)))
            start = t
        if m := _STEP.search(text):
            rollout = _seconds(m.group(2), m.group(3))
            phases.append((f"step {m.group(1)}: rollout", rollout, peak(start, start + rollout)))
            phases.append((f"step {m.group(1)}: update", t - start - rollout, peak(start + rollout, t)))
            start = t
    note = next((text for _, text in lines if text.startswith("gradient checkpointing:")), "")
    summary = json.loads((out / "summary.json").read_text())
    shutil.rmtree(out.parent, ignore_errors=True)  # its checkpoints (~1 GB each for SmolLM2)
    return {
        "phases": phases,
        "sampled_peak_mb": max(mb for _, mb in samples),
        "peak_rss_mb": summary.get("peak_rss_mb"),
        "checkpointing": note,
        "wall_s": time.monotonic() - t0,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--sft-steps", type=int, default=2)
    ap.add_argument("--set", action="append", default=[], dest="sets", metavar="KEY=VALUE")
    ap.add_argument("--limit-mb", type=float, default=None, help="exit 1 when the run's peak is over this")
    a = ap.parse_args(argv)
    r = run(a.config, a.steps, a.sft_steps, a.sets)
    cpu = platform.processor() or platform.machine()
    print(f"{a.config} {' '.join(a.sets)} · {cpu} · OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '-')}")
    print(r["checkpointing"])
    print("| phase | seconds | peak RSS MB |\n|---|---:|---:|")
    for name, seconds, mb in r["phases"]:
        print(f"| {name} | {seconds:.1f} | {mb:,} |")
    print(
        f"| whole run (summary.json's peak_rss_mb; sampled) | {r['wall_s']:.1f} | {r['peak_rss_mb']:,.0f} ({r['sampled_peak_mb']:,}) |"
    )
    if a.limit_mb is not None and (r["peak_rss_mb"] or 0) > a.limit_mb:
        print(f"over the limit: {r['peak_rss_mb']:,.0f} MB > {a.limit_mb:,.0f} MB")
        raise SystemExit(1)


if __name__ == "__main__":
    main()
