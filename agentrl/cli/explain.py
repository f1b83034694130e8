"""``agentrl explain``: print, token by token, what the rewards, values, advantages and returns were.

Two forms: ``--arrays FILE.json`` (one response given as plain arrays) and ``TRAJ.jsonl --index I``
(a stored trajectory: its turns, then its policy tokens with the numbers the update used, rebuilt
by ``agentrl.replay`` or read from a training run with ``--run``).
"""

from __future__ import annotations

import argparse

from agentrl.cli.args import add_expansion_args, int_range

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    from agentrl.learn.algorithm import ESTIMATORS

    p = sub.add_parser(
        "explain",
        help="show token by token the scores, KL, rewards, values, δ, advantages and returns",
        description=(
            "Recompute and print the per-token RL quantities of one response. --arrays FILE.json holds "
            "tokens, response_mask, values, either token_level_rewards or token_level_scores with kl "
            "and beta, and gamma, lam (see examples/one_plus_one.json). TRAJ.jsonl --index I explains a "
            "stored trajectory: its turns, then its policy tokens with masked spans as one line each, the "
            "reward's token marked and the advantages summed per turn (see docs/replay.md)."
        ),
    )
    p.add_argument("trajectories", nargs="?", metavar="TRAJ.jsonl", help="stored trajectories")
    p.add_argument("--arrays", metavar="FILE.json", help="per-token arrays of one response")
    p.add_argument(
        "--index", type=int, default=0, metavar="I", help="which trajectory of the file (default 0)"
    )
    p.add_argument(
        "--segment",
        type=int,
        metavar="K",
        help="a trajectory whose context was rewritten: which context segment's row (0-based; "
        "default: the last, where the answer is)",
    )
    p.add_argument(
        "--run", metavar="RUN_DIR", help="a training run: its tokenizer, config and stored numbers"
    )
    p.add_argument("--critic", metavar="PATH", help="a PPO checkpoint whose critic gives the values")
    p.add_argument(
        "--tokenizer", metavar="T", help="a local tokenizer directory (default: RUN_DIR/tokenizer)"
    )
    p.add_argument(
        "--algorithm",
        choices=ESTIMATORS,
        help="advantage estimator (default: the run's, else ppo with --critic, else grpo)",
    )
    add_expansion_args(p)
    p.add_argument(
        "--format", choices=("table", "json"), default="table", help="output format (default: table)"
    )
    p.add_argument(
        "--decimals", type=int_range(0, 17), default=4, help="decimals shown in the table (default: 4)"
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from agentrl.errors import ConfigError

    if args.arrays and args.trajectories:
        raise ConfigError("give either --arrays FILE.json or TRAJ.jsonl, not both")
    if args.arrays:
        from agentrl.explain import explain_arrays, format_json, format_table, load_arrays

        ex = explain_arrays(load_arrays(args.arrays))
        print(format_json(ex) if args.format == "json" else format_table(ex, decimals=args.decimals))
        return 0
    if not args.trajectories:
        raise ConfigError("give TRAJ.jsonl (with --index I) or --arrays FILE.json")
    ex = _explain_stored(args)
    from agentrl.explain import format_trajectory, format_trajectory_json

    print(
        format_trajectory_json(ex) if args.format == "json" else format_trajectory(ex, decimals=args.decimals)
    )
    return 0


def _explain_stored(args: argparse.Namespace):
    from agentrl.explain import explain_trajectory
    from agentrl.replay import (
        RunDir,
        load_critic,
        load_tokenizer,
        load_trajectories,
        pick,
        rebuild_batch,
        resolve_settings,
        row_numbers,
        step_of,
    )
    from agentrl.train.run_config import load_run_config

    trajs, torn = load_trajectories(args.trajectories)  # a torn last line: a note on stderr
    traj = pick(trajs, args.index, args.trajectories, torn)
    index = args.index % len(trajs)
    run = RunDir.open(args.run) if args.run else None
    tokenizer = load_tokenizer(args.tokenizer, args.run)
    run_config, config_notes = load_run_config(run)
    settings = resolve_settings(
        run_config,
        algorithm=args.algorithm or ("ppo" if args.critic and not run else None),
        gamma=args.gamma,
        lam=args.lam,
        max_len=args.max_len,
    )
    a = settings.algorithm
    notes = [*config_notes, *settings.notes]
    common = {"index": index, "algorithm": a.name, "gamma": a.gamma, "lam": a.lam}
    from agentrl.trajectory import training_reward

    r = traj.reward
    reward = training_reward(traj, settings.normalize)  # None: training leaves it out
    if tokenizer is None:
        notes.append("no token table: pass --tokenizer T or --run RUN_DIR")
        return explain_trajectory(traj, notes=notes, **common)
    if reward is None:
        why = "it has no reward" if r is None else f"its reward is {r.status}"
        notes.append(f"not trained: {why} (training leaves it out), so it has no token numbers")
        return explain_trajectory(traj, notes=notes, **common)
    from agentrl.tokens import run_expander

    expander = run_expander(tokenizer, run.sampling_file if run else None, settings.max_len)
    step = step_of(traj, args.trajectories) if run else None
    stats = run.token_stats(step) if run and step is not None else None
    if run and stats is None:
        notes.append(f"the run kept no token numbers for step {step}; recomputed")
    critic = load_critic(args.critic) if args.critic else None
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    rebuilt = rebuild_batch(trajs, expander, settings, stored=stats, critic=critic, pad_id=pad)
    if index not in rebuilt.index:
        notes.append("not trained: no policy token (training leaves it out)")
        return explain_trajectory(traj, notes=notes, **common)
    from agentrl.errors import ConfigError
    from agentrl.tokens import expand_segments, segment_row_id

    rows = expand_segments(expander, traj, reward=reward)  # one per context segment (most: one)
    trained = [i for i, r in enumerate(rows) if r.loss_mask.any()]  # as build_batch keeps them
    k = trained[-1] if args.segment is None else args.segment
    if not 0 <= k < len(rows):
        raise ConfigError(f"--segment {k}: trajectory {traj.id!r} has {len(rows)} context segment(s)")
    if k not in trained:
        raise ConfigError(f"--segment {k}: that context segment sampled no token, so it has no training row")
    if len(rows) > 1:
        notes.append(
            f"context segment {k} of 0..{len(rows) - 1} (the context was rewritten; each segment is its "
            "own training row, its earlier turns masked as its prompt; --segment K shows another)"
        )
    pos = rebuilt.index.index(index) + trained.index(k)
    row, rid = rows[k], segment_row_id(traj.id, k)
    entry = stats.get(rid) if stats is not None and critic is None else None
    if stats is not None and critic is None and entry is None:
        notes.append(f"the run kept no numbers for {rid!r} at step {step}; recomputed")
    numbers, gap = row_numbers(rebuilt, pos, len(row), entry)
    source = "recomputed by replay"
    values_from = {"stored": "stored run", "critic": f"critic {args.critic}", "zero": "zero"}[
        rebuilt.values_from
    ]
    if entry is not None:
        source = f"stored run {args.run} (step {step})"
        values_from = "stored run" if "values" in entry else values_from
        if gap is not None:
            notes.append(f"rebuilt advantages match the stored ones to {gap:.2g}")
    if not a.needs_critic:
        values_from = "none (advantages are group-relative)"
    return explain_trajectory(
        traj,
        row=row,
        tokenizer=tokenizer,
        numbers=numbers,
        values_from=values_from,
        source=source,
        notes=notes,
        **common,
    )
