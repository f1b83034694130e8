"""``agentrl rollout``: run a policy on a suite's tasks and write trajectories (resumable)."""

from __future__ import annotations

import argparse
from typing import Any

from agentrl.cli.args import float_range, int_range

__all__ = ["SETTING_FLAGS", "add_rollout_arguments", "print_summary", "register", "run_command"]


#: Library settings named in errors, and the flags that set them.
SETTING_FLAGS = {"JudgeConfig(model=...)": "--judge-model", "api_base=...": "--api-base"}


def register(subparsers: Any) -> None:
    """Add the ``rollout`` sub-command."""
    p = subparsers.add_parser(
        "rollout",
        help="run a policy on a suite's tasks and write trajectories",
        description="Run episodes concurrently and append trajectories to a JSONL file. Episodes "
        "already in the output are skipped, so re-running the same command resumes.",
    )
    add_rollout_arguments(p)
    p.add_argument(
        "--out",
        required=True,
        help="output JSONL, e.g. runs/NAME/trajectories.jsonl; resuming it needs the same parameters "
        "(kept in OUT.params.json)",
    )
    p.set_defaults(handler=_run, setting_flags=SETTING_FLAGS)


def add_rollout_arguments(p: Any) -> None:
    """Every ``rollout`` option but ``--out`` (``agentrl eval`` takes them too)."""
    p.add_argument("--suite", default=None, help="suite directory (default: the generated sandbox)")
    p.add_argument("--config", default=None, help="an env.yaml with search/fetch/cache/budgets settings")
    p.add_argument(
        "--split",
        default=None,
        help="which of the suite's tasks: train (default; every task of a suite without splits), heldout "
        "(tasks kept out of training, e.g. `sandbox build --heldout-companies`), or all",
    )
    p.add_argument(
        "--policy",
        default="oracle",
        help="oracle | openai:MODEL | litellm:MODEL | hf:PATH (a local transformers directory or an "
        "`agentrl train` run/checkpoint, sampled in batches of --concurrency; docs/models.md; hf:base:NAME, a "
        "base agentrl ships) "
        "(default: oracle)",
    )
    p.add_argument(
        "--device", default="auto", help="hf: where the model runs: auto (CUDA if present), cpu, cuda[:N]"
    )
    p.add_argument(
        "--noise", type=float_range(0, 1), default=None, help="oracle: probability of opening a distractor"
    )
    p.add_argument(
        "--api-base", default=None, help="openai: base URL of the server, e.g. http://127.0.0.1:8000/v1"
    )
    p.add_argument(
        "--api-key",
        default=None,
        help="openai/litellm: the server's API key (default: $OPENAI_API_KEY for https://api.openai.com "
        "only, a placeholder for any other server)",
    )
    p.add_argument(
        "--api-key-env", default=None, metavar="NAME", help="openai/litellm: read the API key from $NAME"
    )
    p.add_argument(
        "--send-tools",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="openai/litellm: send the tool schemas in each request's `tools` (function calling); "
        "default: env.yaml's send_tools, else only with tool_format: openai",
    )
    p.add_argument(
        "--temperature",
        type=float_range(0),
        default=None,
        help="openai/hf: sampling temperature (hf: an agentrl run's own, else 1)",
    )
    p.add_argument(
        "--max-tokens",
        type=int_range(1),
        default=None,
        help="openai/hf: max tokens per turn (hf: an agentrl run's rollout.max_new_tokens, else 512)",
    )
    p.add_argument("-n", type=int_range(1), default=1, help="samples per task (default 1)")
    p.add_argument(
        "--concurrency",
        type=int_range(1),
        default=8,
        help="episodes in flight; hf: the batch size (default 8)",
    )
    p.add_argument("--limit", type=int_range(1), default=None, help="only the first N tasks (N >= 1)")
    p.add_argument("--task", action="append", default=None, help="only this task id (repeatable)")
    p.add_argument("--seed", type=int_range(0), default=0, help="base seed of the per-episode seeds")
    p.add_argument(
        "--cache", choices=["off", "record", "replay"], default=None, help="tool record/replay mode"
    )
    p.add_argument(
        "--cache-path", default=None, help="sqlite file of the tool cache (default: next to --out)"
    )
    p.add_argument("--judge-model", default=None, help="LLM judge for rubrics with LLM criteria (batched)")
    p.add_argument("--judge-api-base", default=None, help="base URL of the judge model's server")
    p.add_argument(
        "--judge-cache",
        default=None,
        help="sqlite verdict cache of the LLM judge (default: that of `agentrl judge`)",
    )
    p.add_argument("--no-judge-cache", action="store_true", help="judge without a verdict cache")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--ray", action="store_true", help="fan episodes out over Ray env workers (extra 'ray'); docs/ray.md"
    )
    p.add_argument(
        "--ray-workers", type=int_range(1), default=2, help="--ray: env worker actors, one CPU each (2)"
    )
    p.add_argument(
        "--ray-address", default=None, help="--ray: join this cluster (e.g. auto); default: start a local Ray"
    )


def _config(args: argparse.Namespace, run: Any) -> dict[str, Any]:
    """The env config of the rollout: ``run``'s (``--policy hf:RUN``) under ``--config`` and the flags."""
    from pathlib import Path

    from agentrl.env.config import merge_env_config, read_env_yaml

    cfg: dict[str, Any] = merge_env_config(
        run.env_config if run is not None else {}, read_env_yaml(args.config) if args.config else {}
    )
    if args.suite:
        cfg["suite"] = args.suite
    if args.split:
        cfg["split"] = args.split
    if args.cache and args.cache != "off":
        path = args.cache_path or str(Path(args.out).with_name("tool_cache.sqlite"))
        cfg["cache"] = {"mode": args.cache, "path": path}
    elif args.cache == "off":
        cfg["cache"] = {"mode": "off"}
    if args.send_tools is not None:
        cfg["send_tools"] = args.send_tools
    if args.judge_model:
        cfg["judge"] = "deferred"
    return cfg


def _run_sampling(policy: str) -> Any:
    """For ``--policy hf:RUN`` (an ``agentrl train`` run or checkpoint): how the run samples
    (``agentrl.train.run_sampling.RunSampling``: its env, spec, ``eval.temperature`` and
    ``rollout.context``), read once; None for any other policy. The run's env is the base of the
    rollout's (a run is evaluated in the env it trained in): ``--config``'s settings merge over it,
    ``--suite`` and ``--split`` replace."""
    if not policy.startswith("hf:") or not policy[3:]:
        return None
    from agentrl.learn.bases import resolve_model
    from agentrl.train.run_sampling import read_run_sampling

    return read_run_sampling(resolve_model(policy[3:]))  # hf:base:NAME, a base agentrl ships


def _judge_cache(args: argparse.Namespace) -> str | None:
    if args.no_judge_cache or not args.judge_model:
        return None
    from agentrl.cli.judge import default_cache_path

    return str(args.judge_cache or default_cache_path())


def _params(args: argparse.Namespace, env_config: dict[str, Any], run: Any) -> dict[str, Any]:
    """The parameters that decide what this rollout samples and how it is scored, as flags (see
    ``agentrl.rollout.resume``): a resumed ``--out`` must have been written with the same."""
    from pathlib import Path

    from agentrl.rollout.resume import env_params

    suite = str(env_config["suite"])
    if suite != "sandbox" and Path(suite).is_dir():
        suite = str(Path(suite).resolve())
    params: dict[str, Any] = {"--policy": args.policy}
    if args.policy.partition(":")[0] == "oracle":
        params["--noise"] = args.noise if args.noise is not None else 0.0
    else:
        for flag, value in (("--temperature", args.temperature), ("--max-tokens", args.max_tokens)):
            if value is not None:
                params[flag] = value
    params |= {"--seed": args.seed, "--suite": suite}
    if run is not None:
        params["hf:RUN sampling"] = run.params()
    if args.judge_model:
        params["--judge-model"] = args.judge_model
    return params | env_params(env_config)


def _run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from agentrl.jsonl import dumps

    summary = run_command(args)
    print_summary(Console(stderr=True), summary)
    print(dumps(summary.as_dict()))
    return 1 if summary.failed else 0


def run_command(args: argparse.Namespace) -> Any:
    """Run the rollout the parsed ``args`` describe (with a progress bar on stderr unless
    ``--no-progress``); returns its ``RolloutSummary``. One writer per ``--out``: the rollout holds
    ``.OUT.lock`` beside it while it runs (``agentrl.runlock``); a second rollout (or ``agentrl
    eval``) into the same file is refused, naming the first."""
    from agentrl.outputs import check_output_file
    from agentrl.runlock import file_lock_path, lock_output

    check_output_file(args.out)
    with lock_output(file_lock_path(args.out), what=f"--out {args.out}"):
        return _rollout(args)


def _rollout(args: argparse.Namespace) -> Any:
    import asyncio

    from agentrl.credentials import explicit_key
    from agentrl.env.config import load_env_config
    from agentrl.env.suite import load_suite
    from agentrl.outputs import check_output_file, naming
    from agentrl.policy import make_policy
    from agentrl.rollout import run_rollout
    from agentrl.rollout.resume import check_resume, record_params
    from agentrl.rollout.runner import select_tasks

    check_output_file(args.out)
    run = _run_sampling(args.policy)
    cfg = _config(args, run)
    if cfg.get("cache", {}).get("mode") == "record":
        check_output_file(cfg["cache"]["path"], flag="--cache-path")
    env_config = load_env_config(cfg, source=args.config or "<command line>")
    select_tasks(
        load_suite(env_config.suite).tasks_in(env_config.split), args.task, args.limit
    )  # unknown ids fail here
    params = _params(args, env_config.model_dump(mode="json"), run)
    check_resume(args.out, params)
    policy_opts = {
        "noise": args.noise,
        "api_base": args.api_base,
        "api_key": explicit_key(args.api_key, args.api_key_env),
        "temperature": args.temperature,
        "max_tokens": args.max_tokens,
    }
    policy: Any
    if args.policy.startswith("hf:"):
        from agentrl.errors import ConfigError

        if args.ray:
            raise ConfigError("--policy hf: samples in this process; drop --ray")
        if not args.policy[3:]:
            raise ConfigError("--policy: hf needs a path, as hf:PATH")
        from agentrl.learn.bases import resolve_model
        from agentrl.train.hf_policy import load_hf_policy

        policy = load_hf_policy(
            resolve_model(args.policy[3:]),
            device=args.device,
            temperature=args.temperature,
            max_tokens=args.max_tokens,
            run=run,
        )
    else:
        policy = make_policy(args.policy, **policy_opts)
    record_params(args.out, params)

    from agentrl.train.progress import Progress, make_progress

    # a bar on a terminal; in a log or a pipe, a line every tenth of the episodes and every 30 s
    progress = Progress() if args.no_progress else make_progress(live=True)
    rewards: list[float] = []

    with progress.counted("rollout") as bar:

        def on_done(traj: Any) -> None:
            if traj is not None and traj.reward is not None and traj.reward.total is not None:
                rewards.append(traj.reward.total)
            bar.advance(f"reward {sum(rewards) / len(rewards):.3f}" if rewards else "")

        common = dict(
            n=args.n,
            concurrency=args.concurrency,
            seed=args.seed,
            tasks=args.task,
            limit=args.limit,
            on_start=bar.total,
            on_done=on_done,
            judge_model=args.judge_model,
            judge_api_base=args.judge_api_base,
            judge_cache=_judge_cache(args),
        )

        async def main():
            if not args.ray:
                return await run_rollout(cfg, policy, args.out, **common)
            import functools

            from agentrl.rollout.ray_backend import run_rollout_ray

            await policy.aclose()  # each Ray worker makes its own client from the same options
            factory = functools.partial(make_policy, args.policy, **policy_opts)
            return await run_rollout_ray(
                cfg, factory, args.out, workers=args.ray_workers, address=args.ray_address, **common
            )

        try:
            with naming(args.out):  # a write to the output that fails (ENOSPC) names it
                return asyncio.run(main())
        finally:
            progress.close()  # after the count's last line


def print_summary(console: Any, summary: Any) -> None:
    """The rollout's one summary line (and its first failures) on ``console``."""
    out = summary.as_dict()
    console.print(
        f"[bold]{out['episodes']}[/] episodes ({out['skipped']} already done, {out['failed']} failed) in "
        f"{out['elapsed_s']:.1f}s · mean reward "
        + (f"{out['mean_reward']:.3f}" if out["mean_reward"] is not None else "-")
        + (
            f" (normalised {out['mean_normalized_reward']:.3f})"
            if out["mean_normalized_reward"] is not None
            else ""
        )
        + f" · {out['tool_calls_per_episode']:.2f} tool calls/episode"
        + (
            f" ({out['tool_call_episodes']:.0%} of episodes call a tool)"
            if out["tool_call_episodes"] is not None
            else ""
        )
        + (
            f" · official {out['official_share']:.0%} of {out['opened_pages']} pages opened"
            if out["official_share"] is not None
            else ""
        )
        + f" · {out['errors']} tool errors · "
        f"truncations {out['truncations'] or 0} · judge errors {out['judge_errors']}"
        + (f" · {out['unjudged']} not judged (no --judge-model)" if out["unjudged"] else "")
        + (
            f" · {out['turns_without_token_ids']}/{out['sampled_turns']} sampled turns without token ids "
            "(retokenized for training, not token-in-token-out)"
            if out["turns_without_token_ids"]
            else ""
        )
    )
    for line in summary.failures[:5]:
        console.print(f"[red]failed[/] {line}")
