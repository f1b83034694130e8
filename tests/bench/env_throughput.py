"""Environment and rollout throughput on the default sandbox (5,750 pages, 550 tasks).

    python -m tests.bench.env_throughput [--episodes 550] [--queries 2000] [--latency 0.05] [--concurrency 32]

Three figures, each against a baseline measured in the same run:

1. search queries/s of the BM25 backend (with the clock mask) vs a naive linear scan that counts
   query-term hits in every page (what a corpus this size costs without an index);
2. env steps/s of full oracle episodes (parse → tool → render → score) vs the same backend calls
   made directly, i.e. the env's overhead per tool step;
3. rollout episodes/s with the openai policy against a local OpenAI-compatible server that answers
   every turn after a fixed latency, as a fraction of the bound concurrency / (turns × latency).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import tempfile
import threading
import time


def bench_search(n_queries: int) -> dict[str, float]:
    from agentrl.env.backends.sandbox import sandbox_backend
    from agentrl.env.suite import load_suite

    suite = load_suite("sandbox")
    sb = sandbox_backend(suite.corpus_path)
    queries = [(t.ground_truth["query"], t.day) for t in suite.tasks]
    queries = (queries * (n_queries // len(queries) + 1))[:n_queries]
    t0 = time.perf_counter()
    for q, day in queries:
        sb.search(q, 5, before=day)
    bm25 = n_queries / (time.perf_counter() - t0)
    lowered = [f"{a} {b}".lower() for a, b in zip(sb.titles, sb.texts, strict=True)]
    n_naive = max(20, n_queries // 50)
    t0 = time.perf_counter()
    for q, _ in queries[:n_naive]:
        terms = re.findall(r"\w\w+", q.lower())
        scores = [sum(doc.count(w) for w in terms) for doc in lowered]
        sorted(range(len(scores)), key=scores.__getitem__, reverse=True)[:5]
    naive = n_naive / (time.perf_counter() - t0)
    return {"bm25_qps": bm25, "naive_qps": naive, "ratio": bm25 / naive}


def bench_env(episodes: int) -> dict[str, float]:
    from agentrl.env import ResearchEnv
    from agentrl.env.backends.base import Page
    from agentrl.env.tools import render_page, render_search
    from agentrl.policy import EpisodeContext, OraclePolicy

    env = ResearchEnv()
    policy = OraclePolicy(noise=0.3)
    tasks = (env.suite.tasks * (episodes // len(env.suite.tasks) + 1))[:episodes]
    turns = []
    for i, task in enumerate(tasks):  # pre-compute the policy's turns: time the env alone
        env.reset(seed=i, options={"task": task})
        ctx = EpisodeContext(task_id=task.id, date=task.date, seed=i, ground_truth=task.ground_truth)
        msgs = []
        done = False
        while not done:
            m = asyncio.run(policy.act(env.messages, ctx))
            msgs.append(m)
            *_, term, trunc, _ = env.step(m)
            done = term or trunc
        turns.append(msgs)
    steps = sum(len(t) for t in turns)
    t0 = time.perf_counter()
    for i, (task, msgs) in enumerate(zip(tasks, turns, strict=True)):
        env.reset(seed=i, options={"task": task})
        for m in msgs:
            env.step(m)
    env_sps = steps / (time.perf_counter() - t0)
    sb = env._search
    t0 = time.perf_counter()
    for task in tasks:  # the same backend work, called directly: one search + one fetch per episode
        hits = sb.search(task.ground_truth["query"], 5, before=task.day)
        render_search(task.ground_truth["query"], hits)
        page = sb.fetch(task.ground_truth["official"]["url"], before=task.day)
        render_page(Page(**page.to_dict()), 1, 3000)
    direct_sps = 2 * len(tasks) / (time.perf_counter() - t0)
    return {
        "env_steps_per_s": env_sps,
        "direct_tool_calls_per_s": direct_sps,
        "ratio": env_sps / direct_sps,
        "steps": steps,
    }


def _serve(latency: float, q) -> None:  # runs in a child process, so the server has its own GIL
    from tests.env.openai_server import FakeChatServer

    server = FakeChatServer(latency_s=latency)
    q.put(server.base)
    threading.Event().wait()


def bench_rollout(latency: float, concurrency: int, limit: int) -> dict[str, float]:
    import multiprocessing as mp

    from agentrl.policy import make_policy
    from agentrl.rollout import run_rollout

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_serve, args=(latency, q), daemon=True)
    proc.start()
    try:
        base = q.get(timeout=60)
        with tempfile.TemporaryDirectory() as d:
            policy = make_policy("openai:bench", api_base=base)
            cpu0 = time.process_time()
            s = asyncio.run(
                run_rollout(
                    None, policy, os.path.join(d, "t.jsonl"), n=1, concurrency=concurrency, limit=limit
                )
            )
            cpu = time.process_time() - cpu0
    finally:
        proc.terminate()
        proc.join()
    eps = s.episodes / s.elapsed_s
    bound = concurrency / (2 * latency)  # two model turns per episode
    return {
        "cpu_per_episode_ms": 1000 * cpu / max(1, s.episodes),
        "cpu_busy": cpu / s.elapsed_s,
        "episodes_per_s": eps,
        "bound": bound,
        "fraction": eps / bound,
        "episodes": s.episodes,
        "failed": s.failed,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=550)
    p.add_argument("--queries", type=int, default=2000)
    p.add_argument("--latency", type=float, default=0.05, help="fake server latency per turn (s)")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--rollout-tasks", type=int, default=256)
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    from agentrl.env.suite import load_suite

    load_suite("sandbox")
    from agentrl.env import ResearchEnv

    ResearchEnv()  # builds the sandbox and the BM25 index on first use
    print(f"setup (build/load sandbox + index): {time.perf_counter() - t0:.2f}s")
    s = bench_search(args.queries)
    print(
        f"search: BM25 {s['bm25_qps']:.0f} queries/s vs naive scan {s['naive_qps']:.1f} queries/s "
        f"-> {s['ratio']:.0f}x"
    )
    e = bench_env(args.episodes)
    print(
        f"env: {e['env_steps_per_s']:.0f} steps/s ({e['steps']} steps) vs direct backend calls "
        f"{e['direct_tool_calls_per_s']:.0f}/s -> env at {e['ratio']:.2f}x of direct"
    )
    r = bench_rollout(args.latency, args.concurrency, args.rollout_tasks)
    print(
        f"rollout: {r['episodes_per_s']:.1f} episodes/s with openai policy at {args.latency * 1000:.0f} ms/turn, "
        f"concurrency {args.concurrency}; bound {r['bound']:.1f}/s -> {r['fraction']:.0%} of bound "
        f"({r['episodes']} episodes, {r['failed']} failed; client CPU {r['cpu_per_episode_ms']:.1f} ms/episode, "
        f"busy {r['cpu_busy']:.0%})"
    )


if __name__ == "__main__":
    main()
