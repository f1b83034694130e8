"""What a checkpoint costs on the CPU quickstart, against the steps it protects, measured in one run.

    OMP_NUM_THREADS=2 python -m tests.bench.checkpoint_cost [CONFIG] [--sft-steps 20] [--steps 4] [--saves 5]

Builds the config's trainer (default ``examples/quickstart.yaml``), times ``--sft-steps`` warm-start
steps and ``--steps`` RL steps, then ``--saves`` warm-start and RL checkpoints (``save_warm``,
``save``: model, reference, optimiser, RNG states, written atomically, then pruned). Printed: the
seconds per checkpoint (median) and on disk, the seconds per step, their ratio, and with the config's
``checkpoint_every`` / ``sft_checkpoint_every``: the share of the run's time spent checkpointing and
the most work a kill can lose (the steps between two checkpoints).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from agentrl.rundir import RunDir
from agentrl.train import Trainer, load_train_config

ROOT = Path(__file__).resolve().parents[2]


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", nargs="?", default=str(ROOT / "examples" / "quickstart.yaml"))
    ap.add_argument("--sft-steps", type=int, default=20)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--saves", type=int, default=5)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        over = {"output_dir": str(Path(tmp) / "run"), "sft_steps": args.sft_steps, "steps": args.steps}
        cfg = load_train_config(args.config, {**over, "sft_checkpoint_every": 0})
        defaults = load_train_config(args.config)
        every, sft_every = defaults.checkpoint_every, defaults.sft_checkpoint_every
        t = Trainer(cfg, progress=False)
        t.setup()
        t0 = time.perf_counter()
        t.warm_start()  # ends with the RL step-0 checkpoint
        sft_s = (time.perf_counter() - t0 - t.checkpoint_seconds[-1]) / args.sft_steps
        t0 = time.perf_counter()
        for _ in range(args.steps):
            t.train_step()
        step_s = (time.perf_counter() - t0) / args.steps
        t.checkpoint_seconds.clear()  # the warm start's optimiser still holds its state: as mid-way
        for k in range(args.saves):
            t.save_warm(k + 1)
        warm_s = statistics.median(t.checkpoint_seconds)
        t.checkpoint_seconds.clear()
        for _ in range(args.saves):
            t.step += 1
            t.save()
        rl_s = statistics.median(t.checkpoint_seconds)
        size = _du(RunDir(t.out).latest_checkpoint() or Path(tmp))
        t.judge.close()
        (t.sampler or t.engine).close()
    print(f"config {args.config}: checkpoint_every {every}, sft_checkpoint_every {sft_every}")
    print(f"checkpoint: {rl_s:.3f} s (RL), {warm_s:.3f} s (warm start), {size / 2**20:.1f} MiB on disk")
    print(f"RL step: {step_s:.2f} s; checkpoint / step = {rl_s / step_s:.3f}")
    print(f"warm-start step: {sft_s:.3f} s; checkpoint / step = {warm_s / sft_s:.3f}")
    if every:
        print(
            f"every {every} RL steps: {rl_s / (every * step_s + rl_s):.3%} of the RL time checkpointing; "
            f"a kill loses at most {every * step_s:.0f} s"
        )
    if sft_every:
        print(
            f"every {sft_every} warm-start steps: {warm_s / (sft_every * sft_s + warm_s):.3%} of the warm "
            f"start checkpointing; a kill loses at most {sft_every * sft_s:.0f} s"
        )


if __name__ == "__main__":
    main()
