"""Judge throughput: N trajectories × K criteria against a local fake judge with a fixed latency.

With ``c`` calls in flight and a server that answers each call in ``L`` seconds, no client can
do better than ``c / L`` calls per second: that is the bound. The benchmark reports the achieved
call rate as a fraction of it (the client's overhead: litellm, prompt building, parsing,
scheduling), and the calls per trajectory in batched mode (all criteria in one call) against
per-criterion mode (``criteria_per_call=1``).

    python -m tests.bench.judge_throughput          # N=256, K=6, L=1 s at c=16,32,64; L=0.5, 0.25 at c=32
    python -m tests.bench.judge_throughput --n 512 --latency 2 --concurrency 32 --short-latencies

Each call costs the client about 5-7 ms of CPU (mostly litellm's request and response handling,
which runs on the event loop), so at short latencies the calls queue behind each other and the
fraction drops: that is what the extra short-latency rows show. The "bare aiohttp" rows send the
same requests with no client library, measured in the same run: the rate the machine and the
server allow at that moment, so a loaded machine shows up there too.

The server runs in a separate process so that it does not share the client's interpreter lock.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time

from agentrl.judge import Judge, JudgeConfig, parse_rubric
from agentrl.trajectory import Trajectory


def make_items(n: int, k: int) -> list[tuple[Trajectory, object]]:
    """``n`` trajectories and a rubric of ``k`` LLM criteria (half of them satisfied by each report)."""
    rubric = parse_rubric(
        {
            "id": "bench",
            "criteria": [
                {"id": f"c{j}", "text": f"Mentions `fact {j}` from the sources.", "weight": 1.0}
                for j in range(k)
            ],
        }
    )
    items = []
    for i in range(n):
        facts = " ".join(f"fact {j}." for j in range(k) if (i + j) % 2 == 0)
        report = f"Report {i}: " + facts + " " + "Filler sentence about the findings. " * 40
        traj = Trajectory(
            id=f"t{i}",
            task_id="bench",
            messages=[{"role": "user", "content": f"Task {i}"}, {"role": "assistant", "content": report}],
        )
        items.append((traj, rubric))
    return items


def run(url: str, items, *, concurrency: int, per_call: int, latency: float, tag: str) -> dict[str, float]:
    """Score ``items`` once; return wall time, calls, judge errors and the fraction of the bound."""
    cfg = JudgeConfig(
        model=f"good:{tag}",
        api_base=url,
        concurrency=concurrency,
        criteria_per_call=per_call,
        timeout_s=30,
        max_retries=2,
        include_sources=False,
    )
    judge = Judge(cfg)
    t0 = time.perf_counter()
    rewards = asyncio.run(judge.score_many(items))
    wall = time.perf_counter() - t0
    calls = sum(r.calls for r in rewards)
    errors = sum(r.status != "ok" for r in rewards)
    bound_rate = concurrency / latency
    return {
        "calls": calls,
        "errors": errors,
        "wall": wall,
        "rate": calls / wall,
        "bound": bound_rate,
        "fraction": (calls / wall) / bound_rate,
    }


def bare_http(url: str, items, *, concurrency: int, latency: float) -> dict[str, float]:
    """The same requests (one per trajectory) from ``concurrency`` bare aiohttp workers: the rate
    this machine and server reach with no client library, measured in the same run."""
    import aiohttp

    from agentrl.judge.prompt import build_messages, judge_input

    bodies = []
    for traj, rubric in items:
        inp = judge_input(traj, include_sources=False, source_tools=None, max_source_chars=0)
        messages, _ = build_messages(inp, list(rubric.criteria))
        bodies.append({"model": "good:bare", "messages": messages, "temperature": 0})

    async def go() -> float:
        queue = list(reversed(bodies))
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:

            async def worker() -> None:
                while queue:
                    body = queue.pop()
                    async with session.post(f"{url}/chat/completions", json=body) as resp:
                        await resp.json()

            t0 = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            return time.perf_counter() - t0

    wall = asyncio.run(go())
    rate = len(bodies) / wall
    return {
        "calls": len(bodies),
        "errors": 0,
        "wall": wall,
        "rate": rate,
        "bound": concurrency / latency,
        "fraction": rate / (concurrency / latency),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=256, help="trajectories")
    parser.add_argument("--k", type=int, default=6, help="LLM criteria per rubric")
    parser.add_argument("--latency", type=float, default=1.0, help="server latency per call, seconds")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument(
        "--short-latencies", type=float, nargs="*", default=[0.5, 0.25], help="extra rows at concurrency 32"
    )
    args = parser.parse_args(argv)

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    servers: dict[float, tuple[subprocess.Popen, str]] = {}

    def server_for(latency: float) -> str:
        if latency not in servers:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.judge.fake_server", "--latency", str(latency)],
                cwd=root,
                stdout=subprocess.PIPE,
                text=True,
            )
            servers[latency] = (proc, f"http://127.0.0.1:{int(proc.stdout.readline())}/v1")
        return servers[latency][1]

    def row(mode: str, c: int, latency: float, items, per_call: int) -> None:
        if mode == "bare aiohttp":
            r = bare_http(server_for(latency), items, concurrency=c, latency=latency)
        else:
            r = run(
                server_for(latency),
                items,
                concurrency=c,
                per_call=per_call,
                latency=latency,
                tag=f"{mode}{c}{latency}",
            )
        print(
            f"{mode:<15}{c:>5}{latency:>8.2f}{r['calls']:>7}{r['calls'] / len(items):>11.2f}{r['wall']:>8.2f}"
            f"{r['rate']:>9.1f}{r['bound']:>9.1f}{r['fraction']:>9.1%}"
            + (f"  ({r['errors']} judge errors)" if r["errors"] else ""),
            flush=True,
        )

    try:
        items = make_items(args.n, args.k)
        run(
            server_for(args.latency),
            items[:32],
            concurrency=32,
            per_call=0,
            latency=args.latency,
            tag="warmup",
        )
        print(f"judge throughput: N={args.n} trajectories x K={args.k} LLM criteria, fixed server latency")
        print(
            f"{'mode':<15}{'conc':>5}{'latency':>8}{'calls':>7}{'calls/traj':>11}{'wall s':>8}{'calls/s':>9}"
            f"{'bound/s':>9}{'of bound':>9}"
        )
        for c in args.concurrency:
            row("batched", c, args.latency, items, 0)
        # Per-criterion mode makes K times the calls: a quarter of the trajectories is enough.
        row("per-criterion", 32, args.latency, items[: max(1, args.n // 4)], 1)
        for latency in args.short_latencies:
            row("batched", 32, latency, items, 0)
        # The same calls without litellm: what this machine and the server allow right now.
        for latency in [args.latency, *args.short_latencies]:
            row("bare aiohttp", 32, latency, items, 0)
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
