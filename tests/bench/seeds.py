"""One training config over several seeds and CPU kernel settings: the figures a learning claim needs.

    OMP_NUM_THREADS=2 python -m tests.bench.seeds examples/quickstart.yaml --seeds 0,1,2,3,4 \\
        [--kernels default,avx2] [--out runs/bench-seeds] [--set KEY=VALUE ...] [--check]

Each (kernel setting, seed) is one ``agentrl train CONFIG --set seed=S`` in a subprocess, one after
another (so each has the machine's cores to itself: run it on a quiet machine for the times). Kernel
settings: ``default`` is PyTorch's choice for this CPU; ``avx2`` forces the AVX2 kernels
(``ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2``), so a machine with AVX-512 also shows the
floating-point sums of an AVX2-only one; ``nosimd`` forces the scalar kernels (``ATEN_CPU_CAPABILITY=
default``), a third summation order. The config must evaluate before and after RL (``eval:
{before_train: true, at_end: true}``): the run's ``summary.json`` then holds the held-out
``eval_before``/``eval_after`` scorecards and their paired ``eval_gain``.

Printed: one row per run (training reward first → last 20% of steps, held-out before → after with
intervals over tasks, the paired gain with its interval and p-value, the held-out multi-source
tasks' mean before → after, wall time, the kernel torch used), then per kernel setting, for the
training reward's first and last windows and their difference and for the held-out level and gain,
the mean ± sd over seeds, a 95% interval of the mean over seeds (t) and the worst seed; and the
slowest run. Multi-source tasks are those of the long-horizon families
(``agentrl.env.sandbox.multi.FAMILIES``, read from each evaluated episode's ``info["family"]``):
on ``examples/long-horizon.yaml`` they show whether RL learns the tasks that need several pages.
With ``--set eval.split=all`` the evaluations hold both splits and are read per split of the suite
(``by_split``): the held-out figures are the held-out tasks' alone, and a column adds the training
tasks before → after with their paired gain — the training reward on fixed tasks and samples, which
the per-step windows are not (each step draws other tasks). ``--check`` also marks each run against a bar and exits 1 if one misses it: the
quickstart's (gain ≥ 0.10 with an interval above 0, after ≥ 0.40, ≤ 600 s), or with ``--bar smollm2``
a pretrained model's (before ≥ 0.40, gain ≥ 0.05 above 0, after ≥ 0.60, ≤ 30 min, peak RSS ≤ 4 GiB:
``summary.json``'s ``peak_rss_mb``, also a column). A
finished run (its ``summary.json`` exists) is read, not run again, so an interrupted benchmark
resumes; ``--json`` writes every figure.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from agentrl.train.research_base import cpu_name

KERNELS: dict[str, dict[str, str]] = {
    "default": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "nosimd": {"ATEN_CPU_CAPABILITY": "default"},
}
#: The quickstart's bar (issue 36): held-out gain and level after RL, and wall time.
BAR = {"gain": 0.10, "after": 0.40, "seconds": 600.0}
#: Each recipe's bar (``--bar``): the quickstart's, and a real pretrained model's (issue 38: the warm
#: start itself at least 0.40 held-out, a smaller gain, more time, at most 4 GiB of resident memory).
BARS: dict[str, dict[str, float]] = {
    "quickstart": BAR,
    "smollm2": {"gain": 0.05, "after": 0.60, "before": 0.40, "seconds": 1800.0, "rss_mb": 4096.0},
}
# two-sided 97.5% quantiles of Student's t for 1..30 degrees of freedom (no scipy needed)
_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
         2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
         2.052, 2.048, 2.045, 2.042]  # fmt: skip


def kernel_env(kernel: str) -> dict[str, str]:
    """The environment of a run with ``kernel``'s settings (the others removed)."""
    env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS")}
    return env | KERNELS[kernel]


def capability(kernel: str) -> str:
    """The kernel set torch picks under ``kernel``'s settings (``torch.backends.cpu.get_cpu_capability``)."""
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=kernel_env(kernel)
    )
    return done.stdout.strip() or "?"


def run_one(config: str, seed: int, kernel: str, out: Path, sets: list[str]) -> dict[str, Any]:
    """Train ``config`` with ``seed`` under ``kernel`` into ``out`` (or read a finished run) and return
    its figures."""
    summary = out / "summary.json"
    timing = out / "bench_seconds.json"
    if not summary.exists():
        cmd = [sys.executable, "-m", "agentrl", "train", config, "--no-progress", "--overwrite"]
        for kv in [f"seed={seed}", f"output_dir={out}", *sets]:
            cmd += ["--set", kv]
        t0 = time.monotonic()
        done = subprocess.run(cmd, capture_output=True, text=True, env=kernel_env(kernel))
        seconds = time.monotonic() - t0
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise SystemExit(f"seed {seed} ({kernel}): agentrl train failed: {tail}")
        timing.write_text(json.dumps({"seconds": seconds}))
    s = json.loads(summary.read_text())
    seconds = json.loads(timing.read_text())["seconds"] if timing.exists() else float("nan")
    before, after, gain = s.get("eval_before") or {}, s.get("eval_after") or {}, s.get("eval_gain") or {}
    multi = [multi_source_mean(e.get("file")) for e in (before, after)]
    if not before.get("reward") or not after.get("reward") or "difference" not in gain:
        raise SystemExit(
            f"{summary}: no eval_before/eval_after/eval_gain: set eval.before_train and eval.at_end"
        )
    row = {
        "seed": seed,
        "kernel": kernel,
        "seconds": seconds,
        "train_first": s.get("reward_first"),
        "train_last": s.get("reward_last"),
        "before": before["reward"],
        "after": after["reward"],
        "gain": gain["difference"],
        "p_value": gain["p_value"],
        "multi_before": multi[0],
        "multi_after": multi[1],
        "tasks": after["tasks"],
        "episodes": after["episodes"],
        "peak_rss_mb": s.get("peak_rss_mb"),
        "out": str(out),
    }
    splits = by_split(before.get("file"), after.get("file"), _eval_suite(out))
    if splits is None and _eval_split(out) == "all":
        raise SystemExit(f"{out}: eval.split is all, but its evaluations cannot be read per split")
    if splits and "heldout" in splits:  # eval.split: all — the held-out figures are the held-out tasks'
        held = splits.pop("heldout")
        row |= held
    if splits and "train" in splits:
        row["train_eval"] = splits["train"]
    return row


def _eval_suite(out: Path) -> str | None:
    """The suite a run evaluated on: ``eval.suite``, else the run's env suite (``rollout.env.suite``
    over ``rollout.suite``, as ``RolloutConfig.env_config`` has it)."""
    config = out / "config.json"
    if not config.exists():
        return None
    c = json.loads(config.read_text())
    r = c.get("rollout") or {}
    return (c.get("eval") or {}).get("suite") or (r.get("env") or {}).get("suite") or r.get("suite")


def _eval_split(out: Path) -> str | None:
    config = out / "config.json"
    return (json.loads(config.read_text()).get("eval") or {}).get("split") if config.exists() else None


def by_split(before_file: str | None, after_file: str | None, suite: str | None) -> dict[str, Any] | None:
    """Per split of ``suite``, when the evaluations before and after RL hold tasks of more than one
    (``eval.split: all``): the mean normalised reward before and after with their intervals over
    tasks, the paired gain after − before (by task and sample) with its interval, the sign-flip
    p-value, and the tasks and episodes. On the training split that is the training reward measured
    on fixed tasks and samples — free of the task mix and the sampling of each training step. None
    with one split, or when a file or the suite is gone."""
    from agentrl.env.suite import load_suite
    from agentrl.eval.compare import compare
    from agentrl.eval.scorecard import scorecard
    from agentrl.trajectory import read_trajectories

    files = [before_file, after_file]
    if not suite or not all(f and Path(f).exists() for f in files):
        return None
    split_of = {t.id: t.split for t in load_suite(suite).tasks}  # "sandbox" too: the default suite
    loaded = [list(read_trajectories(Path(f))) for f in files]  # type: ignore[arg-type]
    unknown = {t.task_id for ts in loaded for t in ts} - split_of.keys()
    if unknown:
        raise SystemExit(f"{before_file}: tasks the suite {suite} does not hold ({sorted(unknown)[:3]}...)")
    names = sorted({split_of[t.task_id] for ts in loaded for t in ts})
    if len(names) < 2:
        return None
    figures = {}
    for name in names:
        b, a = ([t for t in ts if split_of[t.task_id] == name] for ts in loaded)
        cards = [scorecard(ts) for ts in (b, a)]
        if cards[0].reward is None or cards[1].reward is None:
            continue  # nothing scored on one side: no figure rather than a guess
        gain = compare(b, a)
        figures[name] = {
            "before": cards[0].reward.model_dump(mode="json"),
            "after": cards[1].reward.model_dump(mode="json"),
            "gain": gain.difference.model_dump(mode="json"),
            "p_value": gain.p_value,
            "multi_before": _multi_source_mean(b),
            "multi_after": _multi_source_mean(a),
            "tasks": cards[1].tasks,
            "episodes": cards[1].episodes,
        }
    return figures


def multi_source_mean(eval_file: str | None) -> float | None:
    """The mean normalised reward of an evaluation's multi-source episodes (``FAMILIES``); None when
    it has none (a suite without them) or the file is gone."""
    from agentrl.trajectory import read_trajectories

    if not eval_file or not Path(eval_file).exists():
        return None
    return _multi_source_mean(read_trajectories(Path(eval_file)))


def _multi_source_mean(trajectories: Any) -> float | None:
    from agentrl.env.sandbox.multi import FAMILIES
    from agentrl.judge import normalized_reward

    rewards = [  # judge errors and unscored episodes are left out, as the evaluation leaves them
        normalized_reward(t)
        for t in trajectories
        if t.info.get("family") in FAMILIES and t.reward is not None and t.reward.total is not None
    ]
    return statistics.fmean(rewards) if rewards else None


def _ci_over_seeds(xs: list[float]) -> tuple[float, float, float, float]:
    """Mean, sd, and the 95% t interval of the mean over seeds."""
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, 0.0, m, m
    sd = statistics.stdev(xs)
    h = _T975[min(len(xs) - 2, len(_T975) - 1)] * sd / math.sqrt(len(xs))
    return m, sd, m - h, m + h


def meets_bar(r: dict[str, Any], bar: dict[str, float] = BAR) -> bool:
    """Whether one run clears ``bar`` (the quickstart's by default): the held-out gain with its interval
    above 0, the level after RL, the wall time, and where the bar has them, the level before RL and the
    peak resident memory (a run that did not record it does not clear a bar on it)."""
    g, rss = r["gain"], r.get("peak_rss_mb")
    return (
        g["mean"] >= bar["gain"]
        and g["low"] > 0
        and r["after"]["mean"] >= bar["after"]
        and r["before"]["mean"] >= bar.get("before", -math.inf)
        and r["seconds"] <= bar["seconds"]
        and ("rss_mb" not in bar or (rss is not None and rss <= bar["rss_mb"]))
    )


def table(rows: list[dict[str, Any]], check: bool, bar: dict[str, float] = BAR) -> str:
    """Markdown: a row per run, then a summary per kernel setting; with ``check``, each run against
    ``bar``."""
    f = "{:.3f}".format
    fixed = any("train_eval" in r for r in rows)  # eval.split: all — the training tasks, evaluated
    head = (
        "| kernel | seed | train first → last | "
        + ("train tasks before → after, gain [95% CI] | " if fixed else "")
        + "held-out before [95% CI] | after [95% CI] | gain [95% CI] | p | held-out multi-source before → after | time | peak RSS |"
    )
    lines = [head + (" bar |" if check else ""), "|" + "---|" * (10 + fixed + check)]
    rss = lambda x: "–" if x is None else f"{x / 1024:.2f} GiB"  # noqa: E731
    multi = lambda x: "–" if x is None else f(x)  # noqa: E731

    def train_tasks(r: dict[str, Any]) -> str:
        t = r.get("train_eval")
        if t is None:
            return "– | "
        g = t["gain"]
        return (
            f"{f(t['before']['mean'])} → {f(t['after']['mean'])}, {g['mean']:+.3f} "
            f"[{g['low']:+.3f}, {g['high']:+.3f}] | "
        )

    for r in rows:
        b, a, g = r["before"], r["after"], r["gain"]
        line = (
            f"| {r['kernel']} ({r['capability']}) | {r['seed']} | {f(r['train_first'])} → {f(r['train_last'])} | "
            + (train_tasks(r) if fixed else "")
            + f"{f(b['mean'])} [{f(b['low'])}, {f(b['high'])}] | {f(a['mean'])} [{f(a['low'])}, {f(a['high'])}] "
            f"| {g['mean']:+.3f} [{g['low']:+.3f}, {g['high']:+.3f}] | {r['p_value']:.4f} "
            f"| {multi(r.get('multi_before'))} → {multi(r.get('multi_after'))} | {r['seconds'] / 60:.1f} min "
            f"| {rss(r.get('peak_rss_mb'))} |"
        )
        lines.append(line + (f" {'yes' if meets_bar(r, bar) else 'NO'} |" if check else ""))
    lines.append("")
    for kernel in dict.fromkeys(r["kernel"] for r in rows):
        rs = [r for r in rows if r["kernel"] == kernel]
        figures = {
            "train first 20%": lambda r: r["train_first"],
            "train last 20%": lambda r: r["train_last"],
            "train gain (last − first)": lambda r: r["train_last"] - r["train_first"],
            **(
                {
                    "train tasks before": lambda r: r["train_eval"]["before"]["mean"],
                    "train tasks after": lambda r: r["train_eval"]["after"]["mean"],
                    "train tasks gain (paired)": lambda r: r["train_eval"]["gain"]["mean"],
                }
                if all("train_eval" in r for r in rs)
                else {}
            ),
            "held-out before": lambda r: r["before"]["mean"],
            "held-out after": lambda r: r["after"]["mean"],
            "held-out gain": lambda r: r["gain"]["mean"],
        }
        for name, value in figures.items():
            m, sd, lo, hi = _ci_over_seeds([value(r) for r in rs])
            worst = min(rs, key=value)
            lines.append(
                f"- {kernel}, {name}: {m:.3f} ± {sd:.3f} over {len(rs)} seeds (95% CI of the mean "
                f"[{lo:.3f}, {hi:.3f}]{', includes 0' if lo <= 0 <= hi else ''}); worst seed {worst['seed']}: "
                f"{value(worst):.3f}"
            )
        if all("train_eval" in r for r in rs):
            up = sum(r["train_eval"]["gain"]["low"] > 0 for r in rs)
            lines.append(
                f"- {kernel}: the train tasks' gain interval excludes 0 (above) in {up} of {len(rs)} runs"
            )
        excl = sum(r["gain"]["low"] > 0 for r in rs)
        slow = max(rs, key=lambda r: r["seconds"])
        peaks = [r for r in rs if r.get("peak_rss_mb") is not None]
        biggest = max(peaks, key=lambda r: r["peak_rss_mb"]) if peaks else None
        lines.append(
            f"- {kernel}: the gain's interval excludes 0 in {excl} of {len(rs)} runs; slowest seed "
            f"{slow['seed']}: {slow['seconds'] / 60:.1f} min"
            + (f"; largest peak RSS seed {biggest['seed']}: {rss(biggest['peak_rss_mb'])}" if biggest else "")
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config")
    ap.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated seeds (0,1,2,3,4)")
    ap.add_argument("--kernels", default="default,avx2", help=f"comma-separated, of {', '.join(KERNELS)}")
    ap.add_argument("--out", default="runs/bench-seeds", help="a run directory per kernel and seed goes here")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a config override")
    ap.add_argument("--check", action="store_true", help="mark each run against the bar (--bar)")
    ap.add_argument(
        "--bar", default="quickstart", choices=sorted(BARS), help="which recipe's bar --check uses"
    )
    ap.add_argument("--json", default=None, help="write every figure here")
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    kernels = [k.strip() for k in args.kernels.split(",") if k.strip()]
    bad = [k for k in kernels if k not in KERNELS]
    if bad:
        ap.error(f"--kernels: unknown {bad[0]!r} (known: {', '.join(KERNELS)})")
    threads = os.environ.get("OMP_NUM_THREADS", "(unset)")
    print(f"CPU: {cpu_name()} · {os.cpu_count()} cores · OMP_NUM_THREADS={threads}", flush=True)
    rows = []
    for kernel in kernels:
        cap = capability(kernel)
        for seed in seeds:
            r = run_one(args.config, seed, kernel, Path(args.out) / f"{kernel}-seed{seed}", args.set)
            r["capability"] = cap
            rows.append(r)
            print(
                f"{kernel} seed {seed}: held-out {r['before']['mean']:.3f} → {r['after']['mean']:.3f} "
                f"(gain {r['gain']['mean']:+.3f} [{r['gain']['low']:+.3f}, {r['gain']['high']:+.3f}]) in "
                f"{r['seconds'] / 60:.1f} min",
                flush=True,
            )
    bar = BARS[args.bar]
    print(table(rows, args.check, bar))
    if args.json:
        Path(args.json).write_text(
            json.dumps({"cpu": cpu_name(), "threads": threads, "runs": rows}, indent=1)
        )
    return 1 if args.check and not all(meets_bar(r, bar) for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
