"""First and last 20% of a training run's RL steps, split the way BENCHMARKS.md's long-horizon
section reads them: the reward of one-source and multi-source tasks (from the trajectories), and
the format, answer and signal metrics (from ``metrics.jsonl``).

    python -m tests.bench.windows runs/bench-lh-n25-lr1e-4-kl/default-seed0 [RUN_DIR ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

METRICS = ("critic/score/normalized_mean", "env/format_errors/mean", "env/tool_call_valid",
           "env/answered/frac", "train/groups_without_signal")  # fmt: skip


def multi_source(task_id: str) -> bool:
    """The long-horizon suite's multi-source families (``agentrl.env.sandbox.multi``, correction)."""
    return (
        task_id.startswith("compare-")
        or "-growth-" in task_id
        or "-so-far-" in task_id
        or task_id.endswith("-restated")
    )


def _reward(t: dict) -> float:
    r = t["reward"]
    return float(r) if isinstance(r, (int, float)) else float((r or {}).get("normalized") or 0.0)


def _families(files: list[Path]) -> str:
    split: dict[bool, list[float]] = {False: [], True: []}
    for f in files:
        for line in f.read_text().splitlines():
            t = json.loads(line)
            split[multi_source(t["task_id"])].append(_reward(t))
    out = []
    for name, key in (("one-source", False), ("multi-source", True)):
        xs = split[key]
        paid = sum(x > 0 for x in xs)
        out.append(f"{name} {statistics.mean(xs):.3f} ({paid} of {len(xs)} paid)" if xs else f"{name} -")
    return ", ".join(out)


def report(run: Path) -> str:
    steps = sorted((run / "trajectories").glob("step_*.jsonl"))
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if METRICS[0] in r]
    w = max(1, round(0.2 * len(rows)))
    lines = [f"{run}: {len(rows)} RL steps, windows of {w}"]
    lines.append(f"  first: {_families(steps[:w])}")
    lines.append(f"  last:  {_families(steps[-w:])}")
    for k in METRICS:
        a = statistics.mean(r.get(k, 0.0) for r in rows[:w])
        b = statistics.mean(r.get(k, 0.0) for r in rows[-w:])
        lines.append(f"  {k}: {a:.3f} -> {b:.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    for run in ap.parse_args(argv).runs:
        print(report(run))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
