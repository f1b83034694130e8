"""Mean normalised reward of the scripted oracle at several noise levels on a suite, split by the
source it opened (the official release, or a gossip page / analyst preview): how far apart the
rubric puts research and the distractor, which is what the quickstart's GRPO learns from.

    python -m tests.bench.oracle_rewards [SUITE] [--samples 8]

Every training task of the suite (the env's ``split``, default ``train``: what the quickstart learns
from), ``--samples`` seeded episodes each, through the env (the env's reward).
"""

from __future__ import annotations

import argparse
import asyncio

from agentrl.env import ResearchEnv
from agentrl.judge import normalized_reward
from agentrl.policy import OraclePolicy
from agentrl.rollout.runner import run_policy_episode


def _mean(xs: list[float]) -> str:
    return f"{sum(xs) / len(xs):.3f} (n={len(xs)})" if xs else "-"


def main(argv: list[str] | None = None) -> None:
    """Print one line per noise level: the mean, and the means by source opened."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("suite", nargs="?", default="examples/quickstart-env")
    ap.add_argument("--samples", type=int, default=8)
    args = ap.parse_args(argv)
    env = ResearchEnv({"suite": args.suite})
    for noise in (0.0, 0.5, 1.0):
        policy = OraclePolicy(noise)
        by: dict[str, list[float]] = {"official": [], "distractor": []}
        for task in env.tasks:
            official = task.ground_truth["official"]["url"].split("://", 1)[1]
            for s in range(args.samples):
                traj = asyncio.run(run_policy_episode(env, policy, task, s, 0))
                pages = [m.text for m in traj.messages if m.role == "tool" and m.text.startswith("Title:")]
                key = "official" if any(official in p for p in pages) else "distractor"
                by[key].append(normalized_reward(traj))
        every = by["official"] + by["distractor"]
        print(
            f"noise={noise:g}: mean {_mean(every)}; opened the official release {_mean(by['official'])}; "
            f"opened a distractor {_mean(by['distractor'])}"
        )


if __name__ == "__main__":
    main()
