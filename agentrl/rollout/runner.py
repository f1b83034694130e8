"""Run many episodes concurrently and write their trajectories.

asyncio with a bound on concurrent episodes: each episode borrows an env from a pool (envs share
their backends and caches) and runs in the episode loop (``agentrl.rollout.episode``) with the
policy as its generate function; env steps run in worker threads so that slow tools never block
the event loop. Finished trajectories go to the JSONL store as they
complete; episodes already in the output (same trajectory id ``task#sample``) are skipped, so an
interrupted run resumes where it stopped. Rubrics that need the LLM judge are scored in batches
at the end when a judge model is given.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrl.env import ResearchEnv
from agentrl.env.config import EnvConfig
from agentrl.env.sources import OPENED, OPENED_OFFICIAL, opened_sources, page_kinds
from agentrl.env.suite import Task
from agentrl.errors import ConfigError
from agentrl.outputs import is_regular_file
from agentrl.policy.base import Policy
from agentrl.rollout.batched import BatchedPolicy
from agentrl.rollout.episode import EpisodeSpec, policy_generate, run_episode
from agentrl.trajectory import Trajectory, TrajectoryStore, read_trajectories

__all__ = [
    "RolloutSummary",
    "plan_episodes",
    "policy_episode_spec",
    "run_policy_episode",
    "run_rollout",
    "select_tasks",
]


@dataclass
class RolloutSummary:
    """What a rollout did: counts, mean reward and the env's error and truncation tallies.

    ``sampled_turns`` counts the assistant turns a model sampled (they carry a ``finish_reason`` or
    token ids; the scripted oracle's do not) and ``turns_without_token_ids`` those among them with no
    token ids: the expander retokenizes them for training (no token-in-token-out guarantee).

    The measures the trainer logs per step, counted by the same functions: the normalised reward of
    each scored episode (``agentrl.judge.normalized_reward``, the trainer's
    ``critic/score/normalized_mean``) and, with ``kinds`` (``agentrl.env.sources.page_kinds`` of the
    suite; ``{}`` without a sandbox corpus), the pages opened and the official ones among them
    (``opened_sources``, the trainer's ``env/opened_pages`` / ``env/opened_official``).
    ``tool_call_episodes`` counts the episodes with at least one tool call the env ran
    (``info["tool_calls"]`` ≥ 1: a research tool, named right, with valid arguments, within the
    budget; a tool that then failed still counts, the ``answer`` call does not).
    """

    episodes: int = 0
    skipped: int = 0
    failed: int = 0
    judged: int = 0
    rewards: list[float] = field(default_factory=list)
    tool_calls: int = 0
    errors: int = 0
    truncations: dict[str, int] = field(default_factory=dict)
    judge_errors: int = 0
    unjudged: int = 0
    sampled_turns: int = 0
    turns_without_token_ids: int = 0
    elapsed_s: float = 0.0
    failures: list[str] = field(default_factory=list)
    normalized: list[float] = field(default_factory=list)
    tool_call_episodes: int = 0
    kinds: dict[str, str] = field(default_factory=dict, repr=False)
    opened_pages: int = 0
    opened_official: int = 0

    @property
    def mean_reward(self) -> float | None:
        """Mean total reward of the scored episodes of this run (None when none was scored)."""
        return sum(self.rewards) / len(self.rewards) if self.rewards else None

    @property
    def mean_normalized_reward(self) -> float | None:
        """Mean normalised reward of the scored episodes of this run (None when none was scored)."""
        return sum(self.normalized) / len(self.normalized) if self.normalized else None

    @property
    def official_share(self) -> float | None:
        """Opened official pages ÷ opened pages (None without page kinds or with no page opened)."""
        return self.opened_official / self.opened_pages if self.kinds and self.opened_pages else None

    def add(self, traj: Trajectory) -> None:
        """Count one finished trajectory."""
        self.episodes += 1
        info = traj.info
        self.tool_calls += int(info.get("tool_calls", 0))
        self.tool_call_episodes += int(info.get("tool_calls", 0)) > 0
        opened = opened_sources([traj], self.kinds)
        self.opened_pages += int(opened.get(OPENED, 0))
        self.opened_official += int(opened.get(OPENED_OFFICIAL, 0))
        self.errors += sum(
            int(info.get(k, 0)) for k in ("format_errors", "unknown_tools", "arg_errors", "tool_errors")
        )
        reason = info.get("truncated_reason")
        if reason:
            self.truncations[reason] = self.truncations.get(reason, 0) + 1
        for m in traj.messages:
            if m.role == "assistant" and (m.finish_reason is not None or m.token_ids is not None):
                self.sampled_turns += 1
                self.turns_without_token_ids += m.token_ids is None
        if traj.reward is not None and traj.reward.total is not None:
            from agentrl.judge import normalized_reward  # the judge's package only once scored

            self.rewards.append(traj.reward.total)
            self.normalized.append(normalized_reward(traj))
        elif traj.reward is not None:
            self.judge_errors += 1
        elif info.get("needs_judge"):
            self.unjudged += 1

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready summary."""
        return {
            "episodes": self.episodes,
            "skipped": self.skipped,
            "failed": self.failed,
            "mean_reward": self.mean_reward,
            "mean_normalized_reward": self.mean_normalized_reward,
            "scored": len(self.rewards),
            "tool_calls": self.tool_calls,
            "tool_calls_per_episode": self.tool_calls / self.episodes if self.episodes else 0.0,
            "tool_call_episodes": self.tool_call_episodes / self.episodes if self.episodes else None,
            "opened_pages": self.opened_pages if self.kinds else None,
            "opened_official": self.opened_official if self.kinds else None,
            "official_share": self.official_share,
            "errors": self.errors,
            "truncations": self.truncations,
            "judge_errors": self.judge_errors,
            "unjudged": self.unjudged,
            "sampled_turns": self.sampled_turns,
            "turns_without_token_ids": self.turns_without_token_ids,
            "elapsed_s": round(self.elapsed_s, 3),
            "episodes_per_s": round(self.episodes / self.elapsed_s, 2) if self.elapsed_s > 0 else None,
        }


async def run_policy_episode(
    env: ResearchEnv, policy: Policy, task: Task, sample: int, seed: int
) -> Trajectory:
    """One episode of ``task`` with ``policy`` on ``env`` in the episode loop; returns its trajectory
    (id ``task#sample``, reset seed ``episode_seed(seed, task.id, sample)``; ``info`` records the
    sample, that seed and the policy's name)."""
    spec = policy_episode_spec(task, sample, seed, policy.name)
    return (await run_episode(env, spec, policy_generate(policy))).trajectory


def policy_episode_spec(task: Task, sample: int, seed: int, policy_name: str) -> EpisodeSpec:
    """The episode of ``task``'s sample ``sample`` for a policy named ``policy_name``: id
    ``task#sample``, reset seed ``episode_seed(seed, task.id, sample)``, ``info`` with the sample,
    that seed and the policy's name."""
    return EpisodeSpec.drawn(task, sample, seed, policy=policy_name)


async def _judge_batch(
    pending: list[tuple[Trajectory, Any]],
    model: str,
    api_base: str | None,
    concurrency: int,
    cache_path: str | None = None,
):
    from agentrl.judge import make_judge, record_reward

    cfg: dict[str, Any] = {"model": model, "concurrency": concurrency, "cache_path": cache_path}
    if api_base:
        cfg["api_base"] = api_base
    with make_judge(cfg) as judge:
        results = await judge.score_many(pending)
    for (traj, rubric), bd in zip(pending, results, strict=True):
        record_reward(traj, bd, rubric)


def select_tasks(suite_tasks: list[Task], tasks: list[str] | None, limit: int | None) -> list[Task]:
    """The tasks a rollout runs, in suite order: those named in ``tasks`` (each must exist), then
    the first ``limit`` (at least 1). A ``ConfigError`` names an unknown id with a few valid ones."""
    if limit is not None and limit < 1:
        raise ConfigError(f"--limit must be at least 1 (or left out for every task), got {limit}")
    if tasks:
        known = {t.id for t in suite_tasks}
        unknown = [t for t in dict.fromkeys(tasks) if t not in known]
        if unknown:
            some = ", ".join(t.id for t in suite_tasks[:3])
            raise ConfigError(
                f"--task {unknown[0]!r}: no such task in the suite ({len(suite_tasks)} tasks, e.g. {some})"
                + (f"; {len(unknown) - 1} more unknown" if len(unknown) > 1 else "")
            )
        wanted = set(tasks)
        suite_tasks = [t for t in suite_tasks if t.id in wanted]
    return suite_tasks if limit is None else suite_tasks[:limit]


def plan_episodes(
    suite_tasks: list[Task], out: Path, n: int, tasks: list[str] | None, limit: int | None
) -> tuple[list[tuple[Task, int]], int]:
    """The (task, sample) pairs still to run and how many are already in ``out`` (resume), in the
    order every rollout backend uses: suite order, the ``tasks`` filter, the first ``limit`` tasks,
    samples 0..n-1. An existing ``out`` is read only when it is a regular file."""
    suite_tasks = select_tasks(suite_tasks, tasks, limit)
    if out.exists() and not is_regular_file(out):
        raise ConfigError(f"{out}: not a regular file; a rollout writes (and resumes) a JSONL file")
    done_ids = {t.id for t in read_trajectories(out)} if out.exists() else set()
    todo = [(t, s) for t in suite_tasks for s in range(n) if f"{t.id}#{s}" not in done_ids]
    return todo, len(suite_tasks) * n - len(todo)


async def run_rollout(
    config: EnvConfig | dict[str, Any] | None,
    policy: Policy | BatchedPolicy,
    out: str | Path,
    *,
    n: int = 1,
    concurrency: int = 8,
    seed: int = 0,
    tasks: list[str] | None = None,
    limit: int | None = None,
    judge_model: str | None = None,
    judge_api_base: str | None = None,
    judge_cache: str | None = None,
    on_done: Callable[[Trajectory | None], None] | None = None,
    on_start: Callable[[int], None] | None = None,
) -> RolloutSummary:
    """Run ``n`` samples of every task of the suite (or of ``tasks``), ``concurrency`` at a time.

    Trajectories are appended to ``out`` as they finish; pairs already there are skipped.
    ``judge_cache`` (a sqlite path) keeps the LLM judge's verdicts, so a run killed while judging
    re-judges nothing it already has.
    ``on_start(total)`` is called once with the number of episodes to run and ``on_done`` once per
    finished (or failed, with None) episode, for progress bars. A ``BatchedPolicy`` (a local model)
    runs ``concurrency`` episodes per lock-step batch, in token mode.
    """
    t0 = time.monotonic()
    first = ResearchEnv(config)
    out = Path(out)
    summary = RolloutSummary(kinds=page_kinds(first.suite))
    todo, summary.skipped = plan_episodes(first.tasks, out, n, tasks, limit)
    if on_start:
        on_start(len(todo))
    pool: asyncio.Queue[ResearchEnv] = asyncio.Queue()
    pool.put_nowait(first)
    for _ in range(min(concurrency, max(1, len(todo))) - 1):
        pool.put_nowait(ResearchEnv(config))
    store = TrajectoryStore(out)
    deferred: list[tuple[Trajectory, Any]] = []

    def failed(task: Task, sample: int, e: Exception) -> None:
        summary.failed += 1
        summary.failures.append(f"{task.id}#{sample}: {type(e).__name__}: {e}")
        if on_done:
            on_done(None)

    async def finished(traj: Trajectory, rubric: Any) -> None:
        if traj.info.get("needs_judge") and judge_model:
            deferred.append((traj, rubric))
        else:
            await asyncio.to_thread(store.append, traj)  # fsync off the event loop
            summary.add(traj)
        if on_done:
            on_done(traj)

    async def one(task: Task, sample: int) -> None:
        assert not isinstance(policy, BatchedPolicy)
        env = await pool.get()
        try:
            traj = await run_policy_episode(env, policy, task, sample, seed)
            rubric = env.rubric
        except Exception as e:  # a policy/server failure loses this episode only; resume retries it
            failed(task, sample, e)
            return
        finally:
            pool.put_nowait(env)
        await finished(traj, rubric)

    async def batch(pairs: list[tuple[Task, int]], bp: BatchedPolicy) -> None:
        envs = [await pool.get() for _ in pairs]
        try:  # the engine runs its own event loop: in a thread, off this one
            trajs = await asyncio.to_thread(
                bp.rollout, envs, [policy_episode_spec(t, s, seed, bp.name) for t, s in pairs]
            )
        except Exception as e:  # the model failed: this batch is lost; resume retries it
            for t, s in pairs:
                failed(t, s, e)
            return
        finally:
            for env in envs:
                pool.put_nowait(env)
        for traj, env in zip(trajs, envs, strict=True):
            await finished(traj, env.rubric)

    try:
        if isinstance(policy, BatchedPolicy):
            for i in range(0, len(todo), concurrency):
                await batch(todo[i : i + concurrency], policy)
        else:
            await asyncio.gather(*(one(t, s) for t, s in todo))
        if deferred:
            await _judge_batch(deferred, judge_model or "", judge_api_base, concurrency, judge_cache)
            for traj, _ in deferred:
                store.append(traj)
                summary.add(traj)
                summary.judged += 1
    finally:
        store.close()
        await policy.aclose()
    summary.elapsed_s = time.monotonic() - t0
    return summary
