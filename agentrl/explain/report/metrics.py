"""What the rows of ``metrics.jsonl`` mean to a reader: a human name for each charted metric (the
metric name stays in the chart's tooltip), and the steps that gave the policy no learning signal.

A step teaches the policy nothing when its update was skipped (``train/skipped_update``: no
trainable trajectory on some rank) or when every advantage was 0 (``critic/advantages/max`` and
``/min`` both 0: a GRPO group whose rewards all tie, say, so the loss and its gradient are 0 and
the optimiser step is skipped).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["METRIC_LABELS", "label", "no_signal_steps"]

METRIC_LABELS: dict[str, str] = {
    "critic/score/normalized_mean": "Mean normalised reward",
    "critic/score/mean": "Mean reward",
    "actor/pg_loss": "Policy-gradient loss",
    "critic/vf_loss": "Value loss",
    "actor/kl_loss": "KL loss (to the reference)",
    "actor/entropy": "Entropy",
    "actor/ppo_kl": "KL, old to new policy",
    "actor/pg_clipfrac": "Clipped fraction (policy)",
    "actor/kl": "KL to the reference",
    "actor/grad_norm": "Policy gradient norm",
    "critic/grad_norm": "Critic gradient norm",
    "critic/advantages/mean": "Mean advantage",
    "critic/advantages/max": "Largest advantage",
    "critic/advantages/min": "Smallest advantage",
    "critic/vf_explained_var": "Explained variance (value)",
    "critic/vf_clipfrac": "Clipped fraction (value)",
    "critic/values/mean": "Mean value estimate",
    "response_length/mean": "Mean response length",
    "prompt_length/mean": "Mean prompt length",
    "env/num_turns/mean": "Turns per episode",
    "env/tool_calls/mean": "Tool calls per episode",
    "env/format_errors/mean": "Format errors per episode",
    "env/answered/frac": "Answered episodes",
    "train/dropped_judge_error": "Dropped: judge errors",
    "train/dropped_untrainable": "Dropped: nothing to train on",
    "timing_s/step": "Whole step",
    "timing_s/rollout": "Rollout",
    "timing_s/judge": "Judge",
    "timing_s/update": "Update",
    "timing_s/adv": "Advantages",
    "sft/loss": "Warm-start loss",
    "val/reward/mean": "Eval: mean normalised reward",
    "val/reward/ci_low": "Eval: 95% interval, low",
    "val/reward/ci_high": "Eval: 95% interval, high",
    "audit/train_mean": "Training judge, sampled steps",
    "audit/audit_mean": "Audit judge, sampled steps",
    "val-audit/train_mean": "Training judge, eval episodes",
    "val-audit/audit_mean": "Audit judge, eval episodes",
    "audit/flip_rate": "Pass/fail flips, sampled steps",
    "audit/kappa": "Cohen's kappa, sampled steps",
    "val-audit/flip_rate": "Pass/fail flips, eval episodes",
    "val-audit/kappa": "Cohen's kappa, eval episodes",
}


def label(metric: str) -> str:
    """The human name of ``metric`` (the metric name itself when it has none)."""
    return METRIC_LABELS.get(metric, metric)


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and math.isfinite(v) else None


def no_signal_steps(rows: list[dict[str, Any]]) -> dict[int, str]:
    """Step → why it gave no learning signal (``"update skipped"`` or ``"every advantage 0"``), for
    the metric rows whose step had none."""
    out: dict[int, str] = {}
    for r in rows:
        step = _num(r.get("step"))
        if step is None:
            continue
        hi, lo = _num(r.get("critic/advantages/max")), _num(r.get("critic/advantages/min"))
        if _num(r.get("train/skipped_update")):
            out[int(step)] = "update skipped"
        elif hi == 0.0 and lo == 0.0:
            out[int(step)] = "every advantage 0"
    return out


def moved_steps(rows: list[dict[str, Any]]) -> set[int]:
    """The steps whose update had a non-zero gradient (``actor/grad_norm`` > 0): with every advantage
    0 the KL loss or the entropy bonus can still move the policy."""
    return {
        int(step)
        for r in rows
        if (step := _num(r.get("step"))) is not None and (_num(r.get("actor/grad_norm")) or 0.0) > 0.0
    }
