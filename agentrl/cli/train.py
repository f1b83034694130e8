"""``agentrl train CONFIG.yaml``: rollouts → judge → expand → advantages → updates, with logs and checkpoints."""

from __future__ import annotations

import argparse
import json


def _value(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train a policy with PPO or GRPO from a YAML config",
        description="Train a policy with PPO or GRPO. Every config field has a default; see --print-config.",
    )
    p.add_argument("config", nargs="?", help="training config YAML (e.g. examples/quickstart.yaml)")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue from the latest intact checkpoint in output_dir (a damaged newer one is named)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="delete the run already in output_dir and start over; a file agentrl did not write, anywhere "
        "in it, is refused by name and nothing is deleted",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field, e.g. --set optim.lr=0 --set steps=10 (repeatable)",
    )
    p.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved config (defaults filled), each field under its description, and exit",
    )
    p.add_argument(
        "--defaults",
        action="store_true",
        help="train with every default where the config sets nothing: no CONFIG, or an empty one "
        "(otherwise an empty config is an error)",
    )
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="plain lines on stderr (one per setup phase and per step) instead of a live display; "
        "also the default when stderr is not a terminal",
    )
    p.set_defaults(handler=run, setting_flags={"JudgeConfig(model=...)": "judge.model"})


def run(args: argparse.Namespace) -> int:
    from agentrl.errors import ConfigError
    from agentrl.train.config import TrainConfig, load_train_config

    overrides = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE")
        overrides[key] = _value(value)
    if args.config:
        cfg = load_train_config(args.config, overrides, allow_empty=args.defaults or args.print_config)
    elif args.print_config or args.defaults:
        cfg = load_train_config(None, overrides) if overrides else TrainConfig()
    else:
        raise ConfigError(
            "give a config file, e.g. agentrl train examples/quickstart.yaml (or --defaults to train "
            "with every default)"
        )
    if args.print_config:
        from agentrl.train.config_doc import annotated_yaml

        print(annotated_yaml(cfg))
        return 0
    from agentrl.train.preflight import check_run

    check_run(cfg, resume=args.resume, overwrite=args.overwrite)  # at once, before torch is imported
    from agentrl.train.distributed import shutdown_distributed
    from agentrl.train.trainer import Trainer

    try:
        trainer = Trainer(cfg, progress=not args.no_progress)
        summary = trainer.run(resume=args.resume, overwrite=args.overwrite)
    except BaseException:
        shutdown_distributed(wait=False)
        raise
    shutdown_distributed(wait=True)
    from agentrl.jsonl import dumps, finite_or_null

    print(dumps(finite_or_null({k: v for k, v in summary.items() if k != "final"}), indent=2))
    return 0
