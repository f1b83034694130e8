"""``agentrl rubric validate PATH...`` and ``agentrl rubric show PATH``."""

from __future__ import annotations

import argparse
from pathlib import Path

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
    """A warning line per regex that may backtrack catastrophically (scoring stays time-bounded)."""
    from agentrl.judge.regex_lint import rubric_warnings

    for w in rubric_warnings(rubric):
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
        elif g.type == "number":
            detail = f"number {g.value:g} {g.unit} ±{g.tolerance:g}".rstrip()
        table.add_row(c.id, c.kind, f"{c.weight:g}", escape(detail), escape(c.text))
    console = Console()
    console.print(table)
    console.print(
        f"mapping {r.mapping}, aggregation {r.aggregation}; "
        f"max attainable score {r.max_score:g}, min {r.min_score:g}; content hash {r.content_hash[:16]}"
    )
    return 0
