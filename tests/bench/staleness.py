"""Wall time per RL step with ``rollout.staleness`` 0 and 1 on the CPU quickstart, measured in one run.

    OMP_NUM_THREADS=2 python -m tests.bench.staleness [CONFIG] [--steps 15] [--variants 0,1,1p:1,0:1] [--set K=V]

Each variant is ``STALENESS[p][:THREADS]``: ``p`` samples in a process of its own
(``rollout.sampler: process``; else ``thread``), ``THREADS`` is ``rollout.torch_threads`` (torch threads
of the trainer and, with staleness 1, of the sampler's thread or process; default: ``OMP_NUM_THREADS``). Every variant starts from the same
warm-started weights (the warm start runs once, with ``OMP_NUM_THREADS``: the one ``agentrl train``
runs without ``torch_threads``), then runs ``--steps`` RL steps of the config. Printed per variant: wall seconds per step over all steps
and over steps 2.. (step 1 cannot overlap), the ratio to the first variant, the mean time the
trainer waited for a rollout (``timing_s/rollout``), and the reward (``critic/score/normalized_mean``)
over the first and the last 20% of the steps and the staleness metric.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from agentrl.train import Trainer, load_train_config
from agentrl.train.report import REWARD_KEY, summarize_rewards


def _value(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _variant(spec: str) -> tuple[int, str, int | None]:
    mode, _, threads = spec.partition(":")
    sampler = "process" if mode.endswith("p") else "thread"
    return int(mode.removesuffix("p")), sampler, int(threads) if threads else None


def _run(config: str, sets: dict, variant: tuple[int, str, int | None], out: Path, weights: dict) -> dict:
    staleness, sampler, threads = variant
    over = {**sets, "output_dir": str(out), "rollout.staleness": staleness, "rollout.sampler": sampler,
            "rollout.torch_threads": threads}  # fmt: skip
    t = Trainer(load_train_config(config, over), progress=False)
    steps = t.cfg.steps
    t.setup()
    t.model.load_state_dict(weights)
    if t.ref is not None:
        t.ref.load_state_dict(weights)
    rows, ends = [], []
    start = time.perf_counter()
    try:
        while t.step < steps:
            rows.append(t.train_step())
            ends.append(time.perf_counter())
    finally:
        t.judge.close()
        (t.sampler or t.engine).close()
    total = ends[-1] - start
    rewards = [r[REWARD_KEY] for r in rows]
    return {
        "per_step": total / steps,
        "per_step_after_1": (ends[-1] - ends[0]) / max(steps - 1, 1),
        "rollout_wait": sum(r["timing_s/rollout"] for r in rows) / steps,
        "staleness": sum(r["rollout/staleness"] for r in rows) / steps,
        "mean_reward": sum(rewards) / len(rewards),
        **summarize_rewards(rewards),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", nargs="?", default="examples/quickstart.yaml")
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a config override")
    ap.add_argument("--variants", default="0,1,1p:1,0:1", help="STALENESS[p][:THREADS], comma-separated")
    args = ap.parse_args(argv)
    sets = {"steps": args.steps} | {k: _value(v) for k, _, v in (s.partition("=") for s in args.set)}
    with tempfile.TemporaryDirectory() as tmp:
        warm = Trainer(load_train_config(args.config, sets | {"output_dir": f"{tmp}/warm"}), progress=False)
        warm.setup()
        t0 = time.perf_counter()
        warm.warm_start()
        print(f"warm start: {time.perf_counter() - t0:.1f} s; torch threads {torch.get_num_threads()}")
        weights = {k: v.clone() for k, v in warm.model.state_dict().items()}
        start_threads = torch.get_num_threads()
        warm.judge.close()
        base = None
        for i, spec in enumerate(args.variants.split(",")):
            staleness, sampler, threads = variant = _variant(spec)
            r = _run(args.config, sets, variant, Path(tmp) / f"v{i}", weights)
            torch.set_num_threads(start_threads)  # the run may have set its own
            base = base or r["per_step"]
            print(
                f"staleness {staleness}{f' ({sampler})' if staleness else ''}, torch threads {threads or start_threads}: "
                f"{r['per_step']:.2f} s/step ({r['per_step'] / base:.2f}x), "
                f"steps 2..: {r['per_step_after_1']:.2f} s/step, waiting for rollouts {r['rollout_wait']:.2f} s/step; "
                f"reward first {r['reward_first']:.3f} last {r['reward_last']:.3f} mean {r['mean_reward']:.3f}; "
                f"staleness metric {r['staleness']:.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
