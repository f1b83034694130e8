"""``agentrl report RUN_DIR``: write a self-contained HTML report of a training run."""

from __future__ import annotations

import argparse

from agentrl.cli.args import int_range


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="write a self-contained HTML report of a training run (curves, criteria, trajectories)",
        description=(
            "Write one HTML page about a training run directory: reward, loss and other curves, "
            "per-criterion pass rates, research or recall (the shares of agentrl eval's scorecard for the "
            "evaluations and the first and last RL steps), judge cost, tool-call statistics, and a "
            "trajectory browser with tokens coloured by advantage. The page needs no network (open it "
            "from file://)."
        ),
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="a training output directory (holds metrics.jsonl)")
    p.add_argument("-o", "--out", metavar="FILE.html", help="where to write (default: RUN_DIR/report.html)")
    p.add_argument(
        "--steps",
        metavar="SPEC",
        help="steps whose trajectories are embedded: 'all', 'last', or e.g. '1,10-20,60' "
        "(default: 6 steps spread from the first to the last)",
    )
    p.add_argument(
        "--max-trajectories",
        type=int_range(0),
        default=8,
        metavar="N",
        help="at most N trajectories per embedded step, spread over the reward range (default: 8)",
    )
    p.add_argument(
        "--tokenizer", metavar="PATH", help="tokenizer for the token view (default: RUN_DIR/tokenizer)"
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from agentrl.explain.report import write_report
    from agentrl.outputs import check_output_file, naming
    from agentrl.rundir import RunDir

    out = Path(args.out) if args.out else RunDir(args.run_dir).report_file
    check_output_file(out, flag="-o" if args.out else "output")
    with naming(out):
        path = write_report(
            args.run_dir,
            args.out,
            steps=args.steps,
            max_trajectories=args.max_trajectories,
            tokenizer=args.tokenizer,
        )
    size = path.stat().st_size
    print(f"wrote {path} ({size / 1e6:.1f} MB)" if size >= 1e5 else f"wrote {path} ({size / 1e3:.0f} kB)")
    return 0
