"""Run logging: ``metrics.jsonl`` (one line per step, verl's metric names), ``sft.jsonl``, optional
TensorBoard / W&B, and the final summary with a reward-curve PNG. What the run shows while it works
is ``agentrl.train.progress``."""

from __future__ import annotations

import resource
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentrl.env.sources import OPENED, OPENED_OFFICIAL
from agentrl.rundir import RunDir, mend_jsonl_tail

__all__ = ["RunLog", "peak_rss_mb", "summarize_rewards", "summarize_sources"]

REWARD_KEY = "critic/score/normalized_mean"
#: The evaluation's mean normalised reward and its interval (``agentrl.eval.during_training``).
VAL_KEY, VAL_LOW, VAL_HIGH = "val/reward/mean", "val/reward/ci_low", "val/reward/ci_high"


def peak_rss_mb() -> float:
    """The largest resident set of this process, or of one of its finished child processes (a process
    sampler's), in MiB, so far: ``summary.json``'s ``peak_rss_mb``. On Linux a process starts from the
    peak of the process that forked it (a shell's is small; a large Python parent's is not)."""
    per_mib = 2**20 if sys.platform == "darwin" else 2**10  # ru_maxrss: bytes on macOS, KiB on Linux
    peak = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return round(peak / per_mib, 1)


def summarize_rewards(rewards: list[float], frac: float = 0.2) -> dict[str, float]:
    """Mean reward over the first and the last ``frac`` of the steps, and the difference."""
    if not rewards:
        return {}
    k = max(1, round(len(rewards) * frac))
    first, last = sum(rewards[:k]) / k, sum(rewards[-k:]) / k
    return {"reward_first": first, "reward_last": last, "reward_gain": last - first, "window_steps": float(k)}


def summarize_sources(rows: Sequence[dict[str, Any]], frac: float = 0.2) -> dict[str, float]:
    """``official_source_first`` / ``_last``: opened official pages ÷ opened pages, pooled over the
    first and the last ``frac`` of the steps (the windows of ``summarize_rewards``); a window that
    opened no page is left out. ``{}`` when the steps counted nothing."""
    counted = [r for r in rows if OPENED in r]
    if not counted:
        return {}
    k = max(1, round(len(rows) * frac))
    out: dict[str, float] = {}
    for name, window in (("official_source_first", rows[:k]), ("official_source_last", rows[-k:])):
        opened = sum(r.get(OPENED, 0.0) for r in window)
        if opened > 0:
            out[name] = sum(r.get(OPENED_OFFICIAL, 0.0) for r in window) / opened
    return out


class RunLog:
    """Append-only metrics for one output directory; survives resumes without duplicate steps."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.run = RunDir(out)
        self.rows: list[dict[str, Any]] = self.run.metrics()
        self._writers: list[Any] = []

    def truncate_after(self, step: int, sft_step: int | None = None) -> None:
        """Resume after ``step``: forget the metrics, trajectories and per-token files of the later
        steps (the run recomputes them), drop a torn last line of ``metrics.jsonl`` (rewritten from
        the rows read) and of ``sft.jsonl`` (cut), so that appending goes on from whole lines.
        ``sft_step`` (a resume inside the warm start): forget the warm-start losses after it too."""
        self.rows = [r for r in self.rows if r.get("step", 0) <= step]
        self.run.rewrite_metrics(self.rows)
        mend_jsonl_tail(self.run.sft_file)
        if sft_step is not None:
            self.run.rewrite_sft([r for r in self.run.sft() if r.get("sft/step", 0) <= sft_step])
        self.run.forget_after(step)

    def sft(self, k: int, loss: float) -> None:
        self.run.append_sft({"sft/step": k, "sft/loss": loss})

    def start(self, cfg: Any) -> None:
        """Write the resolved ``config.json``; open the optional TensorBoard / W&B writers."""
        self.run.write_config(cfg.model_dump(mode="json"))
        if cfg.log_tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._writers.append(("tb", SummaryWriter(str(self.run.tensorboard_dir))))
            except ImportError:
                print("log_tensorboard: tensorboard is not installed; skipping", file=sys.stderr)
        if cfg.log_wandb:
            try:
                import wandb

                self._writers.append(
                    ("wandb", wandb.init(project="agentrl", config=cfg.model_dump(mode="json")))
                )
            except ImportError:
                print("log_wandb: wandb is not installed; skipping", file=sys.stderr)

    def step(self, metrics: dict[str, float]) -> None:
        """Record one step's metrics (flushed at once)."""
        self.rows.append(metrics)
        self.run.append_metrics(metrics)
        step = int(metrics["step"])
        for kind, w in self._writers:
            if kind == "tb":
                for k, v in metrics.items():
                    w.add_scalar(k, v, step)
            else:
                w.log(metrics, step=step)

    def stop(self) -> None:
        for kind, w in self._writers:
            w.close() if kind == "tb" else w.finish()
        self._writers = []

    def finish(
        self, extra: dict[str, Any] | None = None, interrupted: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Write ``summary.json`` (with ``extra``: the evaluation's part) and ``reward_curve.png``;
        return the summary. Rows of step 0 (an evaluation before RL) are no training step.
        ``interrupted``: the run was stopped before its last step (Ctrl-C, SIGTERM); the summary
        covers the steps logged, says so (``"interrupted": true``) and carries these fields (where a
        resume goes on from)."""
        steps = [r for r in self.rows if r.get("step", 0) >= 1]
        rewards = [r.get(REWARD_KEY, 0.0) for r in steps]
        summary: dict[str, Any] = {
            "steps": len(steps),
            **summarize_rewards(rewards),
            **summarize_sources(steps),
        }
        if interrupted is not None:
            summary = {"interrupted": True, **interrupted, **summary}
        summary["peak_rss_mb"] = peak_rss_mb()
        if steps:
            summary["time_s"] = sum(r.get("timing_s/step", 0.0) for r in steps)
            summary["final"] = {k: v for k, v in steps[-1].items() if not k.startswith("timing")}
        summary |= extra or {}
        evals = [
            (int(r["step"]), r[VAL_KEY], r.get(VAL_LOW), r.get(VAL_HIGH)) for r in self.rows if VAL_KEY in r
        ]
        png = self._plot(rewards, evals)
        if png:
            summary["reward_curve"] = str(png)
        self.run.write_summary(summary)
        return summary

    def _plot(
        self, rewards: list[float], evals: Sequence[tuple[int, float, float | None, float | None]] = ()
    ) -> Path | None:
        """The training reward per step and its moving mean; with ``evals``, (step, mean, low,
        high) of each evaluation drawn beside it with its interval."""
        if not rewards and not evals:
            return None
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
        steps = list(range(1, len(rewards) + 1))
        ax.plot(steps, rewards, marker="o", markersize=3, label="training reward (normalised)")
        k = max(1, len(rewards) // 10)
        smooth = [
            sum(rewards[max(0, i - k + 1) : i + 1]) / len(rewards[max(0, i - k + 1) : i + 1])
            for i in range(len(rewards))
        ]
        ax.plot(steps, smooth, label=f"moving mean ({k} steps)")
        if evals:
            xs = [e[0] for e in evals]
            ys = [e[1] for e in evals]
            lo = [y - (e[2] if e[2] is not None else y) for y, e in zip(ys, evals, strict=True)]
            hi = [(e[3] if e[3] is not None else y) - y for y, e in zip(ys, evals, strict=True)]
            ax.errorbar(xs, ys, yerr=[lo, hi], fmt="s-", markersize=4, capsize=3,
                        label="eval (95% CI over tasks)")  # fmt: skip
        ax.set_xlabel("step")
        ax.set_ylabel("reward")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize="small")
        fig.tight_layout()
        path = self.run.reward_curve_file
        fig.savefig(path)
        plt.close(fig)
        return path
