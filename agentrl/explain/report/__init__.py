"""``agentrl report RUN_DIR``: one self-contained HTML page about a training run (layer 5).

Reward, loss and other training curves, per-criterion pass rates, judge cost and tool-call
statistics as inline SVG, research or recall (``agentrl.eval.research``) of the evaluations and the
first and last RL steps, and a trajectory browser: each trajectory as a chat with the policy's
tokens coloured by advantage (masked tokens greyed) and the rubric verdicts with the judge's
reasoning. No network, no external library: the page works from ``file://``.
"""

from __future__ import annotations

from pathlib import Path

from agentrl.atomic import write_atomic
from agentrl.explain.report.page import render_report
from agentrl.explain.report.run import RunData, load_run, parse_steps, sample_trajectories
from agentrl.rundir import RunDir

__all__ = ["RunData", "load_run", "parse_steps", "render_report", "sample_trajectories", "write_report"]


def write_report(
    run_dir: Path | str,
    out: Path | str | None = None,
    *,
    steps: str | None = None,
    max_trajectories: int = 8,
    tokenizer: str | None = None,
) -> Path:
    """Read ``run_dir`` and write its report to ``out`` (default ``RUN_DIR/report.html``); returns
    the path written. ``steps``/``max_trajectories`` choose the trajectories embedded (see
    ``parse_steps``); ``tokenizer`` overrides ``RUN_DIR/tokenizer`` for the token view."""
    run = load_run(run_dir)
    html = render_report(run, steps=steps, max_trajectories=max_trajectories, tokenizer=tokenizer)
    path = Path(out) if out is not None else RunDir(run.path).report_file
    return write_atomic(path, html.encode("utf-8"))
