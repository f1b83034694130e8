"""GAE benchmark: the vectorised ``agentrl.algos.gae`` against the per-timestep loop.

    python -m tests.bench.gae [--batch 64] [--length 4096] [--repeats 5]

One thread, float32, a multi-turn response mask (policy turns separated by observation holes),
sparse final rewards minus a per-token KL cost. Prints both timings, the speed-up ratio and the
largest absolute difference between the two on policy tokens (goal: ≥ 20x, ≤ 1e-5).
"""

from __future__ import annotations

import argparse
import time

import torch

from agentrl.algos import gae
from tests.reference_algos import gae_loop


def make_batch(b: int, t: int, seed: int = 0, multi_turn: bool = True):
    g = torch.Generator().manual_seed(seed)
    mask = torch.zeros(b, t) if multi_turn else torch.ones(b, t)
    for row in range(b if multi_turn else 0):
        pos = 0
        while pos < t:  # alternate policy turns (50–400 tokens) and observations (100–800 tokens)
            n = int(torch.randint(50, 400, (1,), generator=g))
            mask[row, pos : pos + n] = 1
            pos += n + int(torch.randint(100, 800, (1,), generator=g))
    rewards = -0.01 * torch.rand(b, t, generator=g) * mask
    last = (mask * torch.arange(t)).argmax(-1)
    rewards[torch.arange(b), last] += torch.rand(b, generator=g)
    values = torch.rand(b, t, generator=g)
    return rewards, values, mask


def best_of(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--length", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    print(f"B={args.batch} T={args.length} float32, 1 thread, γ=1, λ=0.95; goal ≥ 20x and |diff| ≤ 1e-5")
    print(f"{'mask':<32} {'loop ms':>9} {'vector ms':>10} {'speed-up':>9} {'max |diff|':>11}")
    for name, multi in (("multi-turn (observation holes)", True), ("single turn (all policy tokens)", False)):
        r, v, m = make_batch(args.batch, args.length, multi_turn=multi)
        gae(r, v, m, 1.0, 0.95)  # warm-up
        t_vec = best_of(lambda r=r, v=v, m=m: gae(r, v, m, 1.0, 0.95), args.repeats)
        t_loop = best_of(lambda r=r, v=v, m=m: gae_loop(r, v, m, 1.0, 0.95), max(1, args.repeats // 2))
        adv, ret = gae(r, v, m, 1.0, 0.95)
        ref_a, ref_r = gae_loop(r, v, m, 1.0, 0.95)
        diff = max((adv - ref_a).abs().max().item(), (ret - ref_r).abs().max().item())
        print(f"{name:<32} {t_loop * 1e3:9.1f} {t_vec * 1e3:10.2f} {t_loop / t_vec:8.1f}x {diff:11.1e}")


if __name__ == "__main__":
    main()
