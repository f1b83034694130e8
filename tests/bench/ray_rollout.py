"""Rollout throughput with Ray: 1 vs 2 env workers at the same total concurrency, and asyncio.

    python -m tests.bench.ray_rollout [--episodes 384] [--latency 0.05] [--concurrency 32] [--repeats 2]

A local OpenAI-compatible server (tests/env/openai_server.py, in its own process) answers every
turn after a fixed latency; episodes take 2 model turns and run on the default sandbox. Each
configuration keeps ``--concurrency`` episodes in flight in all: the asyncio runner in this
process, then ``agentrl rollout --ray`` with 1 and with 2 worker actors (concurrency split between
them). Throughput is measured between the first and the last finished episode, so Ray's actor
start-up (seconds, reported separately) is not counted. Prints each configuration's episodes/s
and the ratio 2 workers / 1 worker, per repeat; the bound is concurrency / (2 × latency).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import threading
import time
from functools import partial

os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def _serve(latency: float, q) -> None:  # a child process, so the server has its own GIL
    from tests.env.openai_server import FakeChatServer

    server = FakeChatServer(latency_s=latency)
    q.put(server.base)
    threading.Event().wait()


def _run(kind: str, base: str, episodes: int, concurrency: int) -> dict[str, float]:
    from agentrl.policy import make_policy
    from agentrl.rollout import run_rollout
    from agentrl.rollout.ray_backend import run_rollout_ray

    stamps: list[float] = []
    t0 = time.monotonic()

    def on_done(traj) -> None:
        stamps.append(time.monotonic())

    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "t.jsonl")
        kw = dict(n=1, concurrency=concurrency, limit=episodes, on_done=on_done)
        if kind == "asyncio":
            s = asyncio.run(run_rollout(None, make_policy("openai:bench", api_base=base), out, **kw))
        else:
            workers = int(kind.split("-")[1])
            factory = partial(make_policy, "openai:bench", api_base=base)
            s = asyncio.run(run_rollout_ray(None, factory, out, workers=workers, **kw))
    if s.failed or len(stamps) < 2:
        raise SystemExit(f"{kind}: {s.failed} failed episodes: {s.failures[:3]}")
    return {
        "episodes_per_s": (len(stamps) - 1) / (stamps[-1] - stamps[0]),
        "startup_s": stamps[0] - t0,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=384, help="episodes per configuration (≤ 550)")
    p.add_argument("--latency", type=float, default=0.05, help="server latency per turn, seconds")
    p.add_argument("--concurrency", type=int, default=32, help="episodes in flight, in all")
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args(argv)

    import multiprocessing as mp

    from agentrl.env.suite import load_suite
    from agentrl.rollout.ray_cluster import ensure_ray

    load_suite("sandbox")  # built (or loaded) once, before any timing
    started = ensure_ray(num_cpus=2)  # False: a Ray this process already had, left running
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_serve, args=(args.latency, q), daemon=True)
    proc.start()
    bound = args.concurrency / (2 * args.latency)
    print(
        f"{os.cpu_count()} CPUs; latency {args.latency * 1000:g} ms; concurrency {args.concurrency}; ", end=""
    )
    print(f"bound {bound:.0f} episodes/s; {args.episodes} episodes per configuration")
    try:
        base = q.get(timeout=60)
        for rep in range(args.repeats):
            got = {k: _run(k, base, args.episodes, args.concurrency) for k in ("asyncio", "ray-1", "ray-2")}
            line = " · ".join(
                f"{k} {v['episodes_per_s']:.1f}/s ({v['episodes_per_s'] / bound:.0%} of bound, "
                f"start-up {v['startup_s']:.1f}s)"
                for k, v in got.items()
            )
            ratio = got["ray-2"]["episodes_per_s"] / got["ray-1"]["episodes_per_s"]
            vs = got["ray-2"]["episodes_per_s"] / got["asyncio"]["episodes_per_s"]
            print(f"repeat {rep + 1}: {line}")
            print(
                f"repeat {rep + 1}: ratio ray 2 workers / 1 worker = {ratio:.2f}x; 2 workers / asyncio = {vs:.2f}x"
            )
    finally:
        proc.terminate()
        proc.join()
        if started:
            import ray

            ray.shutdown()


if __name__ == "__main__":
    main()
