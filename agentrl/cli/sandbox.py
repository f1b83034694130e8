"""``agentrl sandbox build``: write a generated sandbox suite (corpus, tasks, env.yaml)."""

from __future__ import annotations

import argparse
from typing import Any

from agentrl.cli.args import int_range

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add the ``sandbox`` sub-command group."""
    p = subparsers.add_parser("sandbox", help="build the generated sandbox web (corpus + tasks)")
    sub = p.add_subparsers(dest="sandbox_command", metavar="ACTION")
    b = sub.add_parser(
        "build",
        help="generate a sandbox suite into a directory",
        description="Generate a seeded world of fictional companies (releases, filings, news, previews, "
        "gossip) and tasks with rubrics. Deterministic: the same seed and size give the same files.",
    )
    b.add_argument("--seed", type=int_range(0), default=0, help="world seed (default 0)")
    b.add_argument(
        "--companies",
        type=int_range(1),
        default=50,
        help="number of companies, at most 2000 (default 50: 5,750 pages, 550 tasks); a build of 200 or "
        "more shows its progress on stderr",
    )
    b.add_argument(
        "--heldout-companies",
        type=int_range(0),
        default=0,
        help="more companies whose tasks form the suite's `heldout` split: same web and settings, "
        "never trained on (default 0)",
    )
    b.add_argument(
        "--worlds",
        type=int_range(1),
        default=1,
        help="separate webs of --companies each (W x companies companies): each task searches and opens "
        "only its own world's pages (default 1: one web)",
    )
    b.add_argument(
        "--names",
        default="sandbox",
        help="company names: sandbox (its own stems, the default) or syllables (random syllables that never "
        "spell one: a world no sandbox build, and so no model trained on them, has seen)",
    )
    b.add_argument(
        "--exclude-world",
        action="append",
        default=[],
        metavar="SEED,COMPANIES",
        type=_world_pair,
        help="never name a company of the sandbox world SEED,COMPANIES (held-out companies counted); "
        "repeatable",
    )
    b.add_argument(
        "--out", default="envs/sandbox-build", help="output directory (default envs/sandbox-build)"
    )
    b.add_argument("--index", action="store_true", help="also build the BM25 index now")
    b.add_argument(
        "--llm-criteria", action="store_true", help="add an LLM-graded sourcing criterion to every rubric"
    )
    b.add_argument(
        "--long-horizon",
        action="store_true",
        help="add the multi-source task families (growth between two years, a comparison of companies, "
        "every quarter of a year so far): several searches and pages per task",
    )
    b.set_defaults(handler=_build)
    p.set_defaults(handler=lambda args: (p.print_help(), 2)[1])


def _build(args: argparse.Namespace) -> int:
    import time
    from pathlib import Path

    from agentrl.jsonl import dumps
    from agentrl.outputs import check_output_dir

    check_output_dir(args.out)
    from agentrl.env.sandbox import MAX_COMPANIES, build
    from agentrl.errors import ConfigError

    if args.companies * args.worlds > MAX_COMPANIES:
        raise ConfigError(
            f"--companies {args.companies * args.worlds}: at most {MAX_COMPANIES} (the generator has 5,040 company names; "
            f"{MAX_COMPANIES} companies are {MAX_COMPANIES * 115:,} pages, about a minute to build)"
        )
    from agentrl.env.sandbox import excluded_stems
    from agentrl.env.sandbox.world import NAME_SCHEMES

    if args.names not in NAME_SCHEMES:
        raise ConfigError(f"--names {args.names}: expected one of {', '.join(NAME_SCHEMES)}")
    t0 = time.monotonic()
    total = args.companies * args.worlds + args.heldout_companies
    stats = build(
        args.out,
        seed=args.seed,
        companies=args.companies,
        heldout=args.heldout_companies,
        llm_criteria=args.llm_criteria,
        long_horizon=args.long_horizon,
        progress=_progress(t0) if total >= 200 else None,
        worlds=args.worlds,
        exclude=excluded_stems(args.exclude_world),
        names=args.names,
    )
    if args.index:
        from agentrl.env.backends.sandbox import sandbox_backend

        sandbox_backend(Path(args.out) / "corpus.jsonl")
    stats["seconds"] = round(time.monotonic() - t0, 2)
    print(dumps(stats))
    return 0


def _world_pair(text: str) -> tuple[int, int]:
    """``SEED,COMPANIES`` (two integers)."""
    try:
        seed, n = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected SEED,COMPANIES (two integers), not {text!r}") from None
    return seed, n


def _progress(t0: float):  # type: ignore[no-untyped-def]
    """A line on stderr at every tenth of the companies rendered."""
    import sys
    import time

    def show(done: int, total: int) -> None:
        if done == total or done % max(1, total // 10) == 0:
            elapsed = time.monotonic() - t0
            print(f"sandbox build: {done}/{total} companies ({elapsed:.1f} s)", file=sys.stderr, flush=True)

    return show
