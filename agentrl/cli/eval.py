"""``agentrl eval``: score a policy on a suite, or stored trajectories, as a scorecard with intervals
over tasks; ``agentrl eval compare A B``: the paired difference of two (docs/eval.md).

Three forms:

- ``agentrl eval --policy P --suite DIR --split heldout -n N --out FILE.jsonl``: run the rollout
  (``agentrl rollout``'s options and machinery: resumable, every policy kind) into FILE, then score it;
- ``agentrl eval FILE.jsonl|RUN_DIR ...``: score judged trajectories (a run directory means its
  latest evaluation, ``RUN/eval/step_NNNNN.jsonl``);
- ``agentrl eval compare A B``: B − A, paired by (task, sample).

The table goes to stderr and the JSON to stdout (as ``agentrl rollout`` does); ``--json PATH``
also writes the JSON, indented.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from agentrl.cli.args import float_range, int_range
from agentrl.cli.rollout import SETTING_FLAGS, add_rollout_arguments

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add the ``eval`` sub-command."""
    p = subparsers.add_parser(
        "eval",
        help="scorecard of a policy or of trajectories (intervals over tasks); eval compare A B",
        description="Score a policy on a suite (--policy, with agentrl rollout's options, into --out), "
        "or stored judged trajectories (FILE.jsonl or a run directory: its latest evaluation), as a "
        "scorecard: mean normalised reward with a bootstrap interval over tasks (95% unless --level), mean@n, best@n, "
        "pass@k, shares of episodes with a tool call, unanswered, cut at the token limit, the official "
        "share of opened pages, each criterion's pass rate, and research or recall: the shares of "
        "searches naming the question's subject, of opened URLs a tool result printed, of answers whose "
        "figures are on an opened page. `agentrl eval compare A B`: B − A paired by (task, sample), "
        "with its interval, a paired sign-flip p-value and the criteria that moved.",
    )
    p.add_argument(
        "inputs",
        nargs="*",
        metavar="FILE",
        help="judged trajectory files or run directories; or `compare A B`",
    )
    add_rollout_arguments(p)
    p.set_defaults(policy=None)  # no policy: score the given files
    p.add_argument("--out", default=None, help="with --policy: the trajectories file the rollout writes")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the JSON result to PATH")
    p.add_argument(
        "--pass-threshold",
        type=float_range(0, 1),
        default=1.0,
        help="pass@k: a sample passes at this normalised reward (default 1: a full-score report)",
    )
    p.add_argument("--level", type=float_range(0, 1, lo_open=True), default=0.95, help="interval level")
    p.add_argument("--n-boot", type=int_range(100), default=10_000, help="bootstrap resamples (10000)")
    p.add_argument(
        "--stats-seed", type=int_range(0), default=0, help="seed of the bootstrap and permutation draws"
    )
    p.set_defaults(handler=_run, setting_flags=SETTING_FLAGS)


def _trajectory_file(path: str) -> Path:
    """A trajectories file, or a run directory's latest evaluation; ``ConfigError`` otherwise."""
    from agentrl.errors import ConfigError
    from agentrl.rundir import RunDir

    p = Path(path)
    if p.is_dir():
        files = RunDir(p).eval_files()
        if not files:
            raise ConfigError(
                f"{p}: a directory with no evaluation (eval/step_NNNNN.jsonl); give a JSONL file"
            )
        return files[max(files)]
    if not p.is_file():
        raise ConfigError(f"{p}: no such trajectories file or run directory")
    return p


def _read(paths: list[str]) -> tuple[list[Any], list[str]]:
    """The trajectories of ``paths`` (files or run directories), and the files read. One episode per
    (task, sample) across them all (``one_per_episode``, as ``eval compare`` has it); a reward that is
    not a finite number on its rubric's range is refused by the reader, naming file:line and field."""
    from agentrl.eval.episodes import one_per_episode
    from agentrl.trajectory import read_trajectories

    files = [_trajectory_file(x) for x in paths]
    per_file = [(str(f), list(read_trajectories(f))) for f in files]
    one_per_episode(per_file)
    return [t for _, trajs in per_file for t in trajs], [f for f, _ in per_file]


def _emit(args: argparse.Namespace, table: str, data: dict[str, Any]) -> None:
    import sys

    from agentrl.jsonl import dumps
    from agentrl.outputs import naming
    from agentrl.rundir import write_json

    print(table, file=sys.stderr, flush=True)
    if args.json:
        with naming(args.json):
            write_json(Path(args.json), data)
    print(dumps(data))


def _run(args: argparse.Namespace) -> int:
    from agentrl.errors import ConfigError

    inputs = list(args.inputs)
    if inputs[:1] == ["compare"]:
        if len(inputs) != 3 or args.policy:
            raise ConfigError("eval compare takes two inputs, A and B (trajectory files or run directories)")
        return _compare(args, inputs[1], inputs[2])
    if inputs and args.policy:
        raise ConfigError("give trajectory files or --policy (with --out), not both")
    if not inputs and not args.policy:
        raise ConfigError("give trajectory files to score, `compare A B`, or --policy P --out FILE")
    rc = 0
    if args.policy:
        if not args.out:
            raise ConfigError("--policy: give --out FILE.jsonl, where the rollout writes its trajectories")
        from rich.console import Console

        from agentrl.cli.rollout import print_summary, run_command

        summary = run_command(args)
        print_summary(Console(stderr=True), summary)
        rc = 1 if summary.failed else 0
        inputs = [args.out]
    return _score(args, inputs) or rc


def _score(args: argparse.Namespace, inputs: list[str]) -> int:
    import sys

    from agentrl.eval import scorecard, scorecard_table

    trajs, files = _read(inputs)
    if not trajs:
        from agentrl.errors import ConfigError

        raise ConfigError(f"{', '.join(files)}: no trajectories")
    card = scorecard(trajs, pass_threshold=args.pass_threshold, level=args.level, n_boot=args.n_boot,
                     seed=args.stats_seed)  # fmt: skip
    _emit(
        args, scorecard_table(card, title=" + ".join(files)), {"files": files, **card.model_dump(mode="json")}
    )
    if card.unjudged:
        print(
            f"note: {card.unjudged} episodes are not judged (their rubrics need the LLM judge): "
            "`agentrl judge` them, or roll out with --judge-model",
            file=sys.stderr,
        )
    return 0


def _compare(args: argparse.Namespace, a: str, b: str) -> int:
    from agentrl.eval.compare import compare, comparison_table

    ta, (fa,) = _read([a])
    tb, (fb,) = _read([b])
    c = compare(ta, tb, a_name=fa, b_name=fb, level=args.level, n_boot=args.n_boot, seed=args.stats_seed)
    _emit(args, comparison_table(c), c.model_dump(mode="json"))
    return 0
