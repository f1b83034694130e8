"""``agentrl replay TRAJ.jsonl``: re-run, re-score and re-expand stored trajectories.

Three steps, each run when asked for and in this order: ``--cache replay`` re-runs the episodes
from a recorded tool cache (no network); ``--rubric``/``--judge-model`` re-scores them and prints
per-criterion deltas against the stored scores; ``--tensors OUT.pt`` rebuilds the exact training
tensors. ``--out`` writes the resulting trajectories.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from agentrl.cli.args import add_expansion_args, float_range, int_range

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``replay`` command."""
    from agentrl.cli.judge import add_response_format
    from agentrl.learn.algorithm import ESTIMATORS

    p = sub.add_parser(
        "replay",
        help="re-score, re-run or re-expand stored trajectories (deterministic, offline)",
        description=(
            "Re-run stored episodes from a recorded tool cache (--cache replay), re-score them under a new "
            "rubric or judge with per-criterion deltas (--rubric, --judge-model), and rebuild the exact "
            "training tensors (--tensors OUT.pt). See docs/replay.md."
        ),
    )
    p.add_argument("trajectories", metavar="TRAJ.jsonl", help="stored trajectories")
    g = p.add_argument_group("re-score")
    g.add_argument(
        "--rubric", metavar="R.yaml", help="rubric for every trajectory (default: each one's info.rubric)"
    )
    g.add_argument("--judge-model", metavar="M", help="litellm model of the LLM judge")
    g.add_argument("--api-base", metavar="URL", help="the judge's OpenAI-compatible server")
    g.add_argument(
        "--concurrency", type=int_range(1), default=16, metavar="N", help="judge calls in flight (16)"
    )
    g.add_argument("--judge-cache", metavar="PATH", help="verdict cache (default: agentrl judge's)")
    g.add_argument("--no-judge-cache", action="store_true", help="do not read or write the verdict cache")
    add_response_format(g)
    t = p.add_argument_group("tensors")
    t.add_argument(
        "--tensors", metavar="OUT.pt", help="write the rebuilt batch (torch.save of a dict of tensors)"
    )
    t.add_argument(
        "--tokenizer", metavar="T", help="a local tokenizer directory (default: RUN_DIR/tokenizer)"
    )
    t.add_argument("--run", metavar="RUN_DIR", help="a training run: tokenizer, config, stored values")
    t.add_argument("--critic", metavar="PATH", help="a PPO checkpoint whose critic gives the values")
    t.add_argument("--algorithm", choices=ESTIMATORS, help="default: the run's, else grpo")
    add_expansion_args(t)
    t.add_argument(
        "--raw-reward", action="store_true", help="train on the rubric total, not its normalised score"
    )
    r = p.add_argument_group("re-run")
    r.add_argument(
        "--cache", choices=("replay",), help="re-run the episodes, answering tools from the tool cache"
    )
    r.add_argument("--cache-path", metavar="PATH", help="the recorded tool cache (sqlite)")
    r.add_argument("--suite", metavar="DIR", help="the suite (default: the trajectories' info.suite)")
    r.add_argument("--config", metavar="ENV.yaml", help="env settings the episodes were recorded with")
    r.add_argument(
        "--policy", choices=("stored", "oracle"), default="stored", help="who acts (default: stored)"
    )
    r.add_argument(
        "--noise", type=float_range(0, 1), default=0.0, help="oracle: probability of opening a distractor"
    )
    p.add_argument("--out", metavar="OUT.jsonl", help="write the re-run / re-scored trajectories")
    p.add_argument(
        "--format", choices=("table", "json"), default="table", help="output format (default: table)"
    )
    p.set_defaults(
        handler=_run, setting_flags={"JudgeConfig(model=...)": "--judge-model", "rubric=...": "--rubric"}
    )


def _env_config(args: argparse.Namespace, trajs: list[Any]) -> dict[str, Any]:
    from pathlib import Path

    from agentrl.env.config import read_env_yaml
    from agentrl.errors import ConfigError

    cfg: dict[str, Any] = read_env_yaml(args.config) if args.config else {}
    suites = sorted({str(t.info["suite"]) for t in trajs if t.info.get("suite")})
    if not (args.suite or cfg.get("suite")) and len(suites) > 1:
        raise ConfigError(
            f"--suite: the trajectories come from {len(suites)} suites; re-run one suite at a time"
        )
    suite = args.suite or cfg.get("suite") or (suites[0] if suites else None)
    if not suite:
        raise ConfigError("--suite: the trajectories name no suite (info.suite); pass --suite DIR")
    cfg["suite"] = suite
    if not args.cache_path:
        raise ConfigError("--cache replay needs --cache-path (the tool cache recorded with the episodes)")
    if not Path(args.cache_path).is_file():
        raise ConfigError(f"--cache-path {args.cache_path}: no such tool cache (record one first)")
    cfg["cache"] = {"mode": "replay", "path": args.cache_path}
    return cfg


def _judge_config(args: argparse.Namespace) -> Any:
    from pydantic import ValidationError

    from agentrl.cli.judge import default_cache_path
    from agentrl.errors import ConfigError
    from agentrl.judge import JudgeConfig

    try:
        return JudgeConfig(
            model=args.judge_model,
            api_base=args.api_base,
            api_key=os.environ.get("AGENTRL_JUDGE_API_KEY"),
            concurrency=args.concurrency,
            response_format=args.response_format,
            cache_path=None if args.no_judge_cache else str(args.judge_cache or default_cache_path()),
        )
    except ValidationError as e:
        err = e.errors()[0]
        raise ConfigError(f"--{str(err['loc'][0]).replace('_', '-')}: {err['msg']}") from None


def _tensors(args: argparse.Namespace, trajs: list[Any]) -> dict[str, Any]:
    from agentrl.errors import ConfigError
    from agentrl.replay import (
        RunDir,
        load_critic,
        load_tokenizer,
        rebuild_batch,
        resolve_settings,
        save_tensors,
        step_of,
    )
    from agentrl.tokens import run_expander
    from agentrl.train.run_config import load_run_config

    run = RunDir.open(args.run) if args.run else None
    tokenizer = load_tokenizer(args.tokenizer, args.run)
    if tokenizer is None:
        raise ConfigError("--tensors needs a tokenizer: --tokenizer T or --run RUN_DIR")
    run_config, config_notes = load_run_config(run)
    settings = resolve_settings(
        run_config,
        algorithm=args.algorithm or ("ppo" if args.critic and not run else None),
        gamma=args.gamma,
        lam=args.lam,
        normalize=False if args.raw_reward else None,
        max_len=args.max_len,
    )
    settings.notes[:0] = config_notes
    stored = None
    if run is not None:
        steps = {step_of(t, args.trajectories) for t in trajs}
        if len(steps) == 1 and None not in steps:
            stored = run.token_stats(steps.pop())
    critic = load_critic(args.critic) if args.critic else None
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    rebuilt = rebuild_batch(
        trajs,
        run_expander(tokenizer, run.sampling_file if run else None, settings.max_len),
        settings,
        stored=stored,
        critic=critic,
        pad_id=pad,
    )
    digest = save_tensors(rebuilt.batch, args.tensors)
    a = settings.algorithm
    return {
        "path": args.tensors,
        "sha256": digest,
        "rows": len(rebuilt.kept),
        "shape": list(rebuilt.batch["input_ids"].shape),
        "keys": sorted(rebuilt.batch),
        "algorithm": a.name,
        "gamma": a.gamma,
        "lam": a.lam,
        "values_from": rebuilt.values_from if a.needs_critic else None,
        "dropped_judge_error": int(rebuilt.stats["train/dropped_judge_error"]),
        "dropped_untrainable": int(rebuilt.stats["train/dropped_untrainable"]),
        "notes": settings.notes,
    }


def _run(args: argparse.Namespace) -> int:
    from agentrl.errors import ConfigError
    from agentrl.jsonl import dumps
    from agentrl.replay import format_deltas, format_rerun, load_trajectories, rerun, rescore
    from agentrl.trajectory import write_trajectories

    rescoring = bool(args.rubric or args.judge_model)
    if not (args.cache or rescoring or args.tensors):
        raise ConfigError("nothing to do: give --cache replay, --rubric / --judge-model, or --tensors OUT.pt")
    if args.out and not (args.cache or rescoring):
        raise ConfigError("--out writes re-run or re-scored trajectories: add --cache replay or --rubric")
    from agentrl.outputs import check_output_file, naming

    if args.out:
        check_output_file(args.out, flag="--out")
    if args.tensors:
        check_output_file(args.tensors, flag="--tensors")
    trajs, _ = load_trajectories(args.trajectories)  # a torn last line: a note on stderr
    if not trajs:
        raise ConfigError(f"{args.trajectories}: no trajectories")
    if args.tensors and args.run:  # the run's stored values apply only to the run's own episodes
        from agentrl.replay.from_run import check_from_run
        from agentrl.rundir import RunDir

        check_from_run(trajs, args.trajectories, RunDir.open(args.run))
    report: dict[str, Any] = {"trajectories": len(trajs), "notes": []}
    text: list[str] = []
    if args.cache:
        cfg = _env_config(args, trajs)
        trajs, results = rerun(trajs, cfg, policy=args.policy, noise=args.noise)
        report["rerun"] = [r.model_dump() for r in results]
        text += ["re-run from the tool cache " + args.cache_path, format_rerun(results), ""]
    if rescoring:
        from agentrl.judge import load_rubric

        rubric = load_rubric(args.rubric) if args.rubric else None
        trajs, rep = rescore(trajs, rubric, _judge_config(args))
        report["rescore"] = rep.model_dump()
        text += [format_deltas(rep), ""]
    if args.out:
        with naming(args.out):
            write_trajectories(args.out, trajs)
        report["out"] = args.out
        text.append(f"wrote {len(trajs)} trajectories to {args.out}")
    if args.tensors:
        tens = _tensors(args, trajs)
        report["tensors"] = tens
        text += [f"note: {n}" for n in tens["notes"]]
        values = f", values {tens['values_from']}" if tens["values_from"] else ""
        text.append(
            f"wrote {tens['rows']} rows {tens['shape'][0]}×{tens['shape'][1]} ({tens['algorithm']}, γ = "
            f"{tens['gamma']:g}, λ = {tens['lam']:g}{values}) to {tens['path']}; sha256 {tens['sha256']}"
        )
        if tens["dropped_judge_error"] or tens["dropped_untrainable"]:
            text.append(
                f"left out as training does: {tens['dropped_judge_error']} unscored or judge errors, "
                f"{tens['dropped_untrainable']} without a policy token"
            )
    print(dumps(report, ensure_ascii=False) if args.format == "json" else "\n".join(text).rstrip())
    return 0
