"""Rollouts fanned out over Ray: env workers as actors, the LLM judge as an async actor.

``run_rollout_ray`` does what ``run_rollout`` does (same episode list, same per-episode seeds,
same resumable JSONL output) with the episodes spread over ``workers`` ``EpisodeWorker`` actors,
one CPU each. A worker owns its envs and its own policy client and runs whole episodes with the
episode loop (``run_policy_episode``), so a trajectory is the same whichever process ran it. The driver
keeps at most ``concurrency`` episodes in flight (least-loaded worker first), writes each
trajectory as soon as it is final (completion order), and sends the ones whose rubric needs the
LLM to the judge actor the moment they finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentrl.env import ResearchEnv
from agentrl.env.config import EnvConfig, load_env_config
from agentrl.env.sources import page_kinds
from agentrl.env.suite import Task, load_suite
from agentrl.judge import record_reward
from agentrl.policy.base import Policy
from agentrl.rollout.ray_cluster import describe_error, ensure_ray, import_ray, start_actors
from agentrl.rollout.ray_judge import start_judge
from agentrl.rollout.runner import RolloutSummary, plan_episodes, run_policy_episode
from agentrl.trajectory import Trajectory, TrajectoryStore

__all__ = ["EpisodeWorker", "run_rollout_ray"]


class EpisodeWorker:
    """The actor side: a policy made by ``policy_factory`` and a pool of envs, one per episode in flight."""

    def __init__(self, config: dict[str, Any] | EnvConfig | None, policy_factory: Callable[[], Policy]):
        self.config = config
        self.policy = policy_factory()
        self.idle: list[ResearchEnv] = [ResearchEnv(config)]  # fails here, at start, on a bad suite

    async def ready(self) -> bool:
        """True once the actor runs."""
        return True

    async def run(self, task: Task, sample: int, seed: int) -> tuple[Trajectory, Any]:
        """One episode (``run_policy_episode``); returns its trajectory and the rubric that scores it."""
        # The driver never sends more episodes than it wants in flight, so the pool stays that size.
        env = self.idle.pop() if self.idle else ResearchEnv(self.config)
        try:
            traj = await run_policy_episode(env, self.policy, task, sample, seed)
            return traj, env.rubric
        finally:
            self.idle.append(env)

    async def close(self) -> None:
        """Release the policy's connections."""
        await self.policy.aclose()


async def run_rollout_ray(
    config: dict[str, Any] | EnvConfig | None,
    policy_factory: Callable[[], Policy],
    out: str | Path,
    *,
    n: int = 1,
    concurrency: int = 8,
    seed: int = 0,
    tasks: list[str] | None = None,
    limit: int | None = None,
    judge_model: str | None = None,
    judge_api_base: str | None = None,
    judge_concurrency: int | None = None,
    judge_cache: str | None = None,
    workers: int = 2,
    address: str | None = None,
    on_done: Callable[[Trajectory | None], None] | None = None,
    on_start: Callable[[int], None] | None = None,
) -> RolloutSummary:
    """``run_rollout`` over ``workers`` Ray actors; the same trajectories for the same seeds and caches.

    ``policy_factory`` (picklable, e.g. ``functools.partial(make_policy, "openai:m", api_base=...)``)
    is called once in every worker and once here to check it. ``judge_concurrency`` bounds the
    judge calls in flight (default ``concurrency``). Joins ``address`` or starts a local Ray when
    none is running, and shuts it down at the end only if it started it. ``on_done`` is called
    once per episode when its trajectory is final (judged) or has failed (None).
    """
    if workers < 1 or concurrency < 1:
        raise ValueError("workers and concurrency must be at least 1")
    t0 = time.monotonic()
    out = Path(out)
    env_config = load_env_config(config)
    suite = load_suite(env_config.suite)
    todo, skipped = plan_episodes(suite.tasks_in(env_config.split), out, n, tasks, limit)
    summary = RolloutSummary(skipped=skipped, kinds=page_kinds(suite))
    await policy_factory().aclose()  # a bad policy spec fails here, not in every worker
    if on_start:
        on_start(len(todo))
    if not todo:
        summary.elapsed_s = time.monotonic() - t0
        return summary
    ray = import_ray()
    started = ensure_ray(address)
    actors: list[Any] = []
    try:
        pool = await asyncio.to_thread(  # waits for the actors: keep the event loop free meanwhile
            start_actors, ray, EpisodeWorker, (config, policy_factory), workers, "Ray env workers"
        )
        actors += pool
        judge = None
        if judge_model:
            cfg: dict[str, Any] = {
                "model": judge_model,
                "concurrency": judge_concurrency or concurrency,
                "cache_path": judge_cache,
            }
            if judge_api_base:
                cfg["api_base"] = judge_api_base
            judge = start_judge(cfg)
            actors.append(judge)
        await _drive(ray, pool, judge, todo, seed, concurrency, out, summary, on_done)
    finally:
        for actor in actors:
            with contextlib.suppress(Exception):  # a dead actor has nothing left to close
                await asyncio.wrap_future(actor.close.remote().future())
            ray.kill(actor)
        if started:
            ray.shutdown()
    summary.elapsed_s = time.monotonic() - t0
    return summary


async def _drive(
    ray: Any,
    pool: list[Any],
    judge: Any,
    todo: list[tuple[Task, int]],
    seed: int,
    concurrency: int,
    out: Path,
    summary: RolloutSummary,
    on_done: Callable[[Trajectory | None], None] | None,
) -> None:
    queue = deque(todo)
    load = [0] * len(pool)
    pending: dict[asyncio.Future[Any], tuple[str, int, str, Any]] = {}
    store = TrajectoryStore(out)

    def submit() -> None:
        while queue and sum(load) < concurrency:
            w = min(range(len(pool)), key=load.__getitem__)
            task, sample = queue.popleft()
            fut = asyncio.wrap_future(pool[w].run.remote(task, sample, seed).future())
            pending[fut] = ("episode", w, f"{task.id}#{sample}", None)
            load[w] += 1

    async def finish(traj: Trajectory) -> None:
        await asyncio.to_thread(store.append, traj)  # fsync off the event loop
        summary.add(traj)
        if on_done:
            on_done(traj)

    try:
        submit()
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for fut in done:
                kind, w, name, traj = pending.pop(fut)
                if kind == "episode":
                    load[w] -= 1
                try:
                    result = fut.result()
                except Exception as e:  # this episode only; resume retries it
                    summary.failed += 1
                    summary.failures.append(f"{name}: {describe_error(e)}")
                    if on_done:
                        on_done(None)
                    continue
                if kind == "judge":
                    traj, rubric = traj
                    record_reward(traj, result, rubric)
                    summary.judged += 1
                    await finish(traj)
                    continue
                traj, rubric = result
                if traj.info.get("needs_judge") and judge is not None:
                    jf = asyncio.wrap_future(judge.score.remote(traj, rubric).future())
                    pending[jf] = ("judge", w, name, (traj, rubric))
                else:
                    await finish(traj)
            submit()
    finally:
        store.close()
