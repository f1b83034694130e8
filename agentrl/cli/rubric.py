"""``agentrl rubric validate PATH...``, ``agentrl rubric show PATH`` and ``agentrl rubric probe``."""

from __future__ import annotations

import argparse
from pathlib import Path

from agentrl.cli.args import float_range, int_range

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``rubric`` command and its ``validate`` and ``show`` sub-commands."""
    p = subparsers.add_parser("rubric", help="validate and show rubric YAML files")
    sub = p.add_subparsers(dest="rubric_command", metavar="ACTION", required=True)
    v = sub.add_parser(
        "validate", help="check rubric files (or directories of them); exit 1 if any is invalid"
    )
    v.add_argument("paths", nargs="+", metavar="PATH", help="rubric YAML files or directories")
    v.set_defaults(handler=_validate)
    s = sub.add_parser("show", help="print a rubric as a table, with its maximum attainable score")
    s.add_argument("path", metavar="PATH", help="a rubric YAML file")
    s.set_defaults(handler=_show)
    pr = sub.add_parser(
        "probe",
        help="run shortcut policies (no research) and the oracle; exit 1 if a shortcut earns too much",
    )
    pr.add_argument("--suite", default="sandbox", help="suite directory or name (default: sandbox)")
    pr.add_argument("--rubric", metavar="PATH", help="score every task with this rubric instead of its own")
    pr.add_argument(
        "--limit", type=int_range(1), default=None, help="probe this many tasks, spread over the suite"
    )
    pr.add_argument(
        "--shortcut", action="append", metavar="NAME", help="run only these shortcuts (repeatable)"
    )
    pr.add_argument("--model", help="judge model (litellm string) for LLM criteria")
    pr.add_argument("--api-base", help="OpenAI-compatible judge server, e.g. http://127.0.0.1:8000/v1")
    pr.add_argument(
        "--max-shortcut",
        type=float_range(),
        default=0.05,
        help="highest mean normalised reward a shortcut may earn",
    )
    pr.add_argument(
        "--min-oracle", type=float_range(), default=0.8, help="lowest mean normalised reward of the oracle"
    )
    pr.add_argument("--json", action="store_true", help="print the results as JSON")
    pr.set_defaults(handler=_probe, setting_flags={"JudgeConfig(model=...)": "--model"})


def _files(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out.extend(sorted([*p.glob("*.yaml"), *p.glob("*.yml")]))
        else:
            out.append(p)
    return out


def _validate(args: argparse.Namespace) -> int:
    from agentrl.errors import ConfigError, RubricError
    from agentrl.judge.rubric import load_rubric

    files = _files(args.paths)
    if not files:
        raise ConfigError(f"no rubric files under {', '.join(args.paths)}")
    bad = 0
    for f in files:
        try:
            r = load_rubric(f)
        except RubricError as e:
            bad += 1
            print(f"error: {e}")
            continue
        kinds = "deterministic" if r.is_deterministic else "llm"
        print(f"ok: {f}: {r.id} v{r.version}, {len(r.criteria)} criteria ({kinds}), max {r.max_score:g}")
        _warn_backtracking(f, r)
    return 1 if bad else 0


def _warn_backtracking(path: Path, rubric) -> None:
    """A warning line per regex that may backtrack catastrophically (scoring stays time-bounded),
    and per criterion that looks inverted (``agentrl.judge.rubric_lint``)."""
    from agentrl.judge.regex_lint import rubric_warnings
    from agentrl.judge.rubric_lint import rubric_lints

    for w in [*rubric_warnings(rubric), *rubric_lints(rubric)]:
        print(f"warning: {path}: {w}")


def _show(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from agentrl.judge.rubric import load_rubric

    r = load_rubric(args.path)
    table = Table(title=f"{r.id} (v{r.version})", caption=r.description or None, show_lines=False)
    for col in ("id", "kind", "weight", "grader", "text"):
        table.add_column(col, justify="right" if col == "weight" else "left", overflow="fold")
    for c in r.criteria:
        g = c.grader
        detail = g.type
        if g.type == "regex":
            detail = f"regex {g.pattern}"
        elif g.type in ("contains", "not_contains"):
            detail = f"{g.type} {g.text!r}"
        elif g.type in ("number", "figure"):
            detail = f"{g.type} {g.value:g} {g.unit} ±{g.tolerance:g}".replace("  ", " ")
        elif g.type == "cited_source":
            detail = f"cited_source ({len(g.sources)} source keys)"
        if c.requires:
            detail += f"; requires {', '.join(c.requires)}"
        table.add_row(c.id, c.kind, f"{c.weight:g}", escape(detail), escape(c.text))
    console = Console()
    console.print(table)
    console.print(
        f"mapping {r.mapping}, aggregation {r.aggregation}; "
        f"max attainable score {r.max_score:g}, min {r.min_score:g}; content hash {r.content_hash[:16]}"
    )
    return 0


def _probe(args: argparse.Namespace) -> int:
    from agentrl.errors import ConfigError
    from agentrl.judge.rubric import load_rubric
    from agentrl.rollout.probe import SHORTCUTS, format_table, probe
    from agentrl.train.progress import LineProgress

    unknown = [s for s in args.shortcut or [] if s not in SHORTCUTS]
    if unknown:
        raise ConfigError(f"unknown shortcut {unknown[0]!r}; expected one of {', '.join(SHORTCUTS)}")
    rubric = load_rubric(args.rubric) if args.rubric else None
    judge = {k: v for k, v in (("model", args.model), ("api_base", args.api_base)) if v}
    res = probe(
        args.suite,
        rubric=rubric,
        shortcuts=args.shortcut,
        limit=args.limit,
        judge=judge,
        max_shortcut=args.max_shortcut,
        phase=LineProgress().phase,  # on stderr: stdout keeps the table or the JSON
    )
    low_oracle = res.oracle.mean < args.min_oracle
    if args.json:
        from agentrl.jsonl import dumps

        rows = [res.oracle, *res.shortcuts]
        print(
            dumps(
                {
                    "tasks": res.tasks,
                    "max_shortcut": args.max_shortcut,
                    "min_oracle": args.min_oracle,
                    "policies": [
                        {
                            "policy": r.policy,
                            "mean": r.mean,
                            "max": max(r.rewards, default=0.0),
                            "passed": r.passed,
                            "judge_errors": r.judge_errors,
                        }
                        for r in rows
                    ],
                    "failing": [r.policy for r in res.failing] + (["oracle"] if low_oracle else []),
                },
                indent=2,
            )
        )
    else:
        print(format_table(res))
        if low_oracle:
            print(f"the oracle earns {res.oracle.mean:.3f}, below --min-oracle {args.min_oracle:g}")
    return 1 if res.failing or low_oracle else 0
