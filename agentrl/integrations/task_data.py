"""A suite's tasks as an engine's dataset rows: one row per task, the prompt as the env shows it.

verl reads parquet (``data_source``, ``prompt``, ``agent_name``, ``reward_model``, ``extra_info``);
TRL takes a ``datasets.Dataset`` with a conversational ``prompt`` and a ``task_id`` column; SkyRL
reads parquet with ``prompt``, ``env_class`` and its ``env_extras``. Every format carries the task
id, which is all our adapters need: the env rebuilds the prompt and holds the rubric.

    python -m agentrl.integrations.task_data --engine verl --out data/train.parquet [--suite DIR] [--limit N]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Literal

from agentrl.env import ResearchEnv
from agentrl.errors import ConfigError
from agentrl.outputs import check_output_file

__all__ = ["task_rows", "write_parquet"]

Engine = Literal["verl", "trl", "skyrl"]
DATA_SOURCE = "agentrl/deep-research"


def task_rows(
    env_config: dict[str, Any] | None = None,
    *,
    engine: Engine,
    limit: int | None = None,
    agent_name: str = "agentrl_research",
    env_class: str = "agentrl-deep-research",
) -> list[dict[str, Any]]:
    """One row per task of the env's suite (the first ``limit``), in ``engine``'s column layout.
    ``prompt`` is the system and user messages the env starts each episode with."""
    env = ResearchEnv(env_config or {})
    rows = []
    for i, task in enumerate(env.tasks[:limit]):
        env.reset(seed=i, options={"task": task})
        prompt = [{"role": m.role, "content": m.text} for m in env.messages]
        if engine == "verl":
            rows.append(
                {
                    "data_source": DATA_SOURCE,
                    "prompt": prompt,
                    "agent_name": agent_name,
                    "ability": task.family,
                    "reward_model": {"style": "agentrl", "ground_truth": task.id},
                    "extra_info": {"task_id": task.id, "index": i, "seed": i},
                }
            )
        elif engine == "trl":
            rows.append({"prompt": prompt, "task_id": task.id, "seed": i})
        elif engine == "skyrl":
            rows.append(
                {
                    "data_source": DATA_SOURCE,
                    "prompt": prompt,
                    "env_class": env_class,
                    "task_id": task.id,
                    "seed": i,
                }
            )
        else:
            raise ValueError(f"engine must be verl, trl or skyrl, not {engine!r}")
    return rows


def write_parquet(rows: list[dict[str, Any]], path: str | Path) -> Path:
    """Write ``rows`` as one parquet file (pandas + pyarrow, which every engine extra installs)."""
    import pandas as pd

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path, index=False)
    return path


def main(argv: list[str] | None = None) -> None:
    """Command line: write a suite's tasks as an engine's parquet dataset."""
    ap = argparse.ArgumentParser(prog="python -m agentrl.integrations.task_data", description=__doc__)
    ap.add_argument("--engine", choices=["verl", "trl", "skyrl"], required=True)
    ap.add_argument("--out", required=True, help="parquet file to write")
    ap.add_argument("--suite", default=None, help="suite directory (default: the embedded sandbox)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N tasks")
    args = ap.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        ap.error(f"argument --limit: must be an integer >= 1, got {args.limit}")
    try:
        check_output_file(args.out)
    except ConfigError as e:
        ap.error(str(e))
    rows = task_rows({"suite": args.suite} if args.suite else {}, engine=args.engine, limit=args.limit)
    print(f"{len(rows)} tasks -> {write_parquet(rows, args.out)}")


if __name__ == "__main__":
    main()
