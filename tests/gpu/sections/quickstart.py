"""The CPU quickstart on CUDA: ``agentrl train examples/quickstart.yaml`` as a user runs it (its own
process, ``device`` the GPU), judged on the run's own ``metrics.jsonl`` and ``summary.json``: the
training reward rises over the run as it does on the CPU, the held-out evaluation before and after
RL, with the wall time, seconds per step and tokens per second. The CPU run's figures
(``CPU_REFERENCE``: BENCHMARKS.md's quickstart table, seed 0) are recorded as the section's reference,
with their date and machine, never among its figures: the report holds what this run measured.

The run is stopped at the section's budget; the figures then cover the steps it finished
(``steps_done`` of ``steps_planned``), so a slow card still reports how far it got and how fast.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.gpu.report import Recorder, Reference

TITLE = "the quickstart on CUDA: the reward rises as on the CPU; wall time"
BUDGET_S = None  # what the kit has left after the other sections
ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "examples" / "quickstart.yaml"
# docs/training.md's doc-test shrink: every phase of the run, in seconds on a CPU.
DRY = ["steps=2", "sft_steps=1", "sft_episodes=4", "sft_batch_size=2", "rollout.tasks_per_step=1", "rollout.group_size=2", "rollout.max_turns=1",
       "rollout.max_new_tokens=8", "model.tokenizer_vocab_size=300", "eval.n=1", "eval.limit=2"]  # fmt: skip
#: The quickstart on the CPU, as BENCHMARKS.md's quickstart table has it (its "learning" row): the same
#: names as the figures this section measures, so the report sets each beside this run's.
CPU_REFERENCE = Reference(
    figures={"reward_first": 0.203, "reward_last": 0.306, "reward_gain": 0.103, "wall_s": 514.4,
             "steps_done": 50, "eval_before": 0.333, "eval_after": 0.443, "eval_gain": 0.110},
    source="BENCHMARKS.md, the quickstart table (on fresh worlds), seed 0: "
    "python -m tests.bench.seeds examples/quickstart.yaml --seeds 0,1,2,3,4",
    date="2026-11-30",
    machine="AMD EPYC, 2 CPU cores (AVX2 kernels), no GPU, nothing else running",
)  # fmt: skip
MIN_STEPS = 30  # fewer finished steps say nothing about learning


def _mean(rows: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    return sum(vals) / len(vals) if vals else None


def _train(argv: list[str], ctx) -> int | None:  # type: ignore[no-untyped-def]
    """``python -m agentrl.train`` in a process of its own, stopped (None) at the section's budget
    less the time to read the run and write the figures."""
    limit = max(ctx.left() - 15, 5)
    with (ctx.scratch / "train.log").open("w") as log:
        cmd = [sys.executable, "-m", "agentrl.train", *argv[1:]]
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return None


def _heldout(out: Path) -> dict:
    """The held-out evaluation's means and the paired gain from the run's ``summary.json`` (a run
    stopped at the budget has none, or the one before RL alone in its metrics)."""
    import json

    path = out / "summary.json"
    summary = json.loads(path.read_text()) if path.exists() else {}
    figures: dict = {}
    for key, field in (("eval_before", "reward"), ("eval_after", "reward"), ("eval_gain", "difference")):
        card = summary.get(key) or {}
        if isinstance(card.get(field), dict):
            figures[key] = card[field]["mean"]
            figures[f"{key}_ci"] = f"[{card[field]['low']:+.3f}, {card[field]['high']:+.3f}]"
    return figures


def _train_here(argv: list[str]) -> int:
    """The same command in this process (the dry run: no second torch import)."""
    from agentrl.cli import main

    return main(argv)


def run(ctx, rec: Recorder) -> None:  # type: ignore[no-untyped-def]
    from agentrl.rundir import RunDir
    from agentrl.train.config import load_train_config
    from agentrl.train.report import REWARD_KEY, summarize_rewards, summarize_sources

    out = ctx.scratch / "run"
    shutil.rmtree(out, ignore_errors=True)
    sets = ([*DRY] if ctx.dry_run else []) + [f"output_dir={out}", f"device={ctx.device.type}"]
    argv = ["train", str(CONFIG), "--no-progress"] + [a for s in sets for a in ("--set", s)]
    planned = load_train_config(CONFIG).steps if not ctx.dry_run else 2
    rec.figures({"command": "agentrl train examples/quickstart.yaml " + " ".join(f"--set {s}" for s in sets[:-2]),
                 "steps_planned": planned})  # fmt: skip
    t0 = time.monotonic()
    code = _train(argv, ctx) if not ctx.dry_run else _train_here(argv)
    wall = time.monotonic() - t0
    run_dir = RunDir(out)
    # the RL steps' rows (the held-out evaluation before RL logs a row of its own at step 0)
    rows = [r for r in run_dir.metrics() if r.get("step", 0) >= 1] if run_dir.metrics_file.exists() else []
    sft = run_dir.sft() if run_dir.sft_file.exists() else []
    step_s = sum(r.get("timing_s/step", 0.0) for r in rows)
    rec.figures({
        "exit_code": code if code is not None else "stopped at the budget",
        "steps_done": len(rows), "complete": len(rows) == planned, "wall_s": wall,
        "setup_and_warm_start_s": wall - step_s, "s_per_step": step_s / len(rows) if rows else None,
        "rollout_s_per_step": _mean(rows, "timing_s/rollout"), "update_s_per_step": _mean(rows, "timing_s/update"),
        "tokens_per_s": _mean(rows, "perf/tokens_per_s"),
        "rollout_logprob_diff_mean": _mean(rows, "actor/rollout_logprob_diff"),
        "sft_loss_first": sft[0]["sft/loss"] if sft else None, "sft_loss_last": sft[-1]["sft/loss"] if sft else None,
    })  # fmt: skip
    rec.figures(_heldout(out))
    rewards = [r.get(REWARD_KEY, 0.0) for r in rows]
    rec.figures({**summarize_rewards(rewards), **summarize_sources(rows)})
    rec.reference("cpu", CPU_REFERENCE)
    curve = out / "reward_curve.png"
    if curve.exists():
        shutil.copy(curve, ctx.out / "quickstart_reward_curve.png")
    if code not in (0, None):
        log = ctx.scratch / "train.log"
        tail = log.read_text()[-400:].strip().splitlines() if log.exists() else []
        raise RuntimeError(f"agentrl train exited with code {code}: {tail[-1] if tail else ''}")
    finite = all(math.isfinite(r.get("actor/grad_norm", 0.0)) for r in rows)
    rec.check("finite", bool(rows) and finite, f"grad norms of {len(rows)} steps")
    if ctx.dry_run:
        rec.check("ran", len(rows) == planned, f"{len(rows)} of {planned} steps")
    elif len(rows) >= MIN_STEPS:
        gain = summarize_rewards(rewards)["reward_gain"]
        rec.check(
            "reward_rises",
            gain > 0,
            f"gain {gain:+.3f} over {len(rows)} of {planned} steps (CPU: {CPU_REFERENCE.figures['reward_gain']:+.3f})",
        )
    else:
        rec.check(
            "reward_rises", False, f"only {len(rows)} steps in the budget (at least {MIN_STEPS} needed)"
        )
