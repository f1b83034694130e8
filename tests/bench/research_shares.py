"""Research or recall? The shares of ``agentrl.eval.research`` for a training run's held-out
evaluations and its first and last RL steps, as a Markdown table (BENCHMARKS.md).

    python -m tests.bench.research_shares runs/quickstart
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agentrl.eval.research import research_shares
from agentrl.trajectory import read_trajectories

__all__ = ["main", "rows"]


def rows(run: Path) -> list[tuple[str, int, dict[str, tuple[int, int]]]]:
    """(label, episodes, {share: (hits, total)}) for each held-out evaluation file of ``run`` and
    its first and last training step's trajectories."""
    files = [(f"held-out eval, {p.stem}", p) for p in sorted((run / "eval").glob("step_*.jsonl"))]
    steps = sorted((run / "trajectories").glob("step_*.jsonl"))
    files += [(f"training tasks, {p.stem}", p) for p in (steps[:1] + steps[-1:] if steps else [])]
    out = []
    for label, path in files:
        trajs = list(read_trajectories(path))
        s = research_shares(trajs)
        counts = {
            "query_names_subject": (s.query_names_subject.hits, s.query_names_subject.total),
            "url_from_context": (s.url_from_context.hits, s.url_from_context.total),
            "answer_figures_opened": (s.answer_figures_opened.hits, s.answer_figures_opened.total),
        }
        out.append((label, len(trajs), counts))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="an agentrl train output directory")
    args = ap.parse_args(argv)
    table = rows(args.run)
    if not table:
        print(f"{args.run}: no eval/ or trajectories/ files", file=sys.stderr)
        return 1
    print(
        "| episodes of | n | search names the subject | URL from a tool result | answer figures on an opened page |"
    )
    print("|---|---|---|---|---|")
    for label, n, c in table:
        cells = [f"{h}/{t}" + (f" ({h / t:.2f})" if t else "") for h, t in c.values()]
        print(f"| {label} | {n} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
