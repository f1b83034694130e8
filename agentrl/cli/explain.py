"""``agentrl explain``: print, token by token, what the rewards, values, advantages and returns were."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "explain",
        help="show token by token the scores, KL, rewards, values, δ, advantages and returns",
        description=(
            "Recompute and print the per-token RL quantities of one response. --arrays FILE.json holds "
            "tokens, response_mask, values, either token_level_rewards or token_level_scores with kl "
            "and beta, and gamma, lam (see examples/one_plus_one.json)."
        ),
    )
    p.add_argument("--arrays", required=True, metavar="FILE.json", help="per-token arrays of one response")
    p.add_argument(
        "--format", choices=("table", "json"), default="table", help="output format (default: table)"
    )
    p.add_argument("--decimals", type=int, default=4, help="decimals shown in the table (default: 4)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from agentrl.explain import explain_arrays, format_json, format_table, load_arrays

    ex = explain_arrays(load_arrays(args.arrays))
    print(format_json(ex) if args.format == "json" else format_table(ex, decimals=args.decimals))
    return 0
