"""The ``agentrl`` command.

Each sub-command lives in its own module under ``agentrl.cli`` and exposes ``register(subparsers)``;
heavy libraries are imported inside the command's handler, never at module import, so that
``agentrl --help`` answers at once. Errors that are the user's (``AgentRLError``) and OS errors
(a full disk, a read-only directory, a missing file) print one line naming the path and exit 1;
a bad argument prints one line and exits 2; ``--debug`` shows the traceback instead. Ctrl-C and
SIGTERM end every command within a second (``agentrl.stopping``), exit status 130 and 143. agentrl's warnings
print as one ``note:`` line each (``agentrl.cli.notes``).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from agentrl import __version__
from agentrl.cli.args import OneLineParser

__all__ = ["COMMANDS", "build_parser", "main"]

#: Modules under ``agentrl.cli`` that each register one or more sub-commands, in ``--help`` order.
COMMANDS: tuple[str, ...] = (
    "train",
    "rollout",
    "eval",
    "model",
    "judge",
    "rubric",
    "sandbox",
    "explain",
    "replay",
    "report",
)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, with every registered sub-command."""
    parser = OneLineParser(
        prog="agentrl",
        description="Train tool-using deep-research agents with reinforcement learning.",
    )
    parser.add_argument("--version", action="version", version=f"agentrl {__version__}")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"agentrl.cli.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    from agentrl.cli.notes import clean_notes
    from agentrl.errors import AgentRLError, MissingSetting
    from agentrl.stopping import stops_on_signals

    try:
        with clean_notes(), stops_on_signals():  # Ctrl-C and SIGTERM: within a second, in every phase
            return int(args.handler(args) or 0)
    except AgentRLError as e:
        if args.debug:
            raise
        flags = getattr(args, "setting_flags", {})  # a library error names a parameter; say the flag
        if isinstance(e, MissingSetting) and e.setting in flags:
            e = e.for_flag(flags[e.setting])
        print(f"agentrl {args.command}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:
        from agentrl.errors import RunInterrupted

        print(f"interrupted: {e}" if str(e) else "interrupted", file=sys.stderr)
        return 143 if isinstance(e, RunInterrupted) and e.signal == "SIGTERM" else 130
    except BrokenPipeError:  # `agentrl explain ... | head`
        return 0
    except OSError as e:  # ENOSPC, EACCES, EROFS, ENOENT ... on a path the user gave or implied
        if args.debug:
            raise
        from agentrl.outputs import os_error_line

        print(f"agentrl {args.command}: error: {os_error_line(e)}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
