"""A step's episodes, from tasks to judged trajectories: the step's tasks (seeded, shared out to ranks
in whole groups), their episode specs, the rollout through the engine (or the batch the one-step
off-policy sampler prepared), the run's one judge (``StepJudge``: the LLM judge where the env could
not score an answer; a trajectory it failed on is dropped later and counted, never scored 0),
dynamic sampling's refills, and the step's trajectory file.

``StepSampling`` is a mixin of ``Trainer``: it reads the trainer's config, tasks, env pool, engine,
sampler and judge. With ``trainer.py`` (the step's phases) and ``update.py`` (advantages and the
update) it is the whole data path of a step; the rows come from ``agentrl.learn.batch.build_batch``,
which replay shares.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentrl.errors import ConfigError
from agentrl.judge import load_rubric, make_judge, record_reward, resolve_rubric
from agentrl.judge.llm import run_sync
from agentrl.learn.dynamic_sampling import fill_groups, refill_order
from agentrl.rollout.episode import EpisodeSpec
from agentrl.rundir import RunDir
from agentrl.sampling.overlap import OneStepOffPolicy, stamp_version
from agentrl.seeds import stable_seed
from agentrl.train.config import TrainConfig, TrainJudgeConfig
from agentrl.train.distributed import all_gather_objects, is_main, rank, world_size
from agentrl.trajectory import Trajectory, write_trajectories

__all__ = ["StepJudge", "StepSampling", "step_seed"]


def step_seed(*parts: Any) -> int:
    """The run's 31-bit seed of ``parts`` (tasks of a step, a refill order, ...; an episode's is
    ``agentrl.seeds.episode_seed``)."""
    return stable_seed(*parts, bits=31)


class StepSampling:
    """The sampling half of a ``Trainer`` step (see the module docstring)."""

    cfg: TrainConfig
    tasks: list[Any]
    envs: list[Any]
    engine: Any
    sampler: OneStepOffPolicy | None
    judge: Any
    out: Path
    step: int
    model: Any
    new_env: Callable[[], Any]

    def _step_tasks(self, step: int) -> list[Any]:
        """Every rank's tasks of ``step``, in order."""
        rng = random.Random(step_seed(self.cfg.seed, "tasks", step))
        return rng.sample(self.tasks, min(self.cfg.rollout.tasks_per_step, len(self.tasks)))

    @staticmethod
    def _my_share(items: list[Any]) -> list[Any]:
        # Contiguous blocks of whole groups per rank: rank 0's rows, then rank 1's, … are the rows of
        # one process in its order, which the mini-batches' global row numbering relies on.
        n, ranks, me = len(items), world_size(), rank()
        return items[me * n // ranks : (me + 1) * n // ranks]

    def _jobs(self, step: int, tasks: list[Any] | None = None) -> list[EpisodeSpec]:
        """The episodes of this rank's tasks of ``step`` (or of ``tasks``), ``group_size`` each."""
        mine = self._my_share(self._step_tasks(step)) if tasks is None else tasks
        specs = []
        for t in mine:
            for s in range(self.cfg.rollout.group_size):
                specs.append(EpisodeSpec.drawn(t, s, self.cfg.seed, step=step))
        return specs

    def _envs(self, n: int) -> list[Any]:
        """The env pool, grown to at least ``n`` envs."""
        while len(self.envs) < n:
            self.envs.append(self.new_env())
        return self.envs

    def _rollout(self, step: int, tasks: list[Any] | None = None) -> list[Trajectory]:
        """This rank's episodes of ``step`` (or of ``tasks``: dynamic sampling's refills) through the
        engine (one env each), stamped with the policy version that sampled them; with staleness 1,
        sampled during the previous step."""
        if self.sampler is not None:
            return self.sampler.take(step, self.step)
        jobs = self._jobs(step, tasks)
        trajs = self.engine.rollout(self._envs(len(jobs)), jobs)
        stamp_version(trajs, self.step)
        return trajs

    def _after_update(self, step: int) -> None:
        """The engine samples the weights of ``step`` next (with staleness 1, from the next rollout
        launched: the one in flight keeps its version)."""
        (self.sampler or self.engine).after_update(self.model, step)

    def _dynamic_sampling(
        self, step: int, trajs: list[Trajectory], m: dict[str, float]
    ) -> tuple[list[Trajectory], list[Trajectory]]:
        """``algorithm.dynamic_sampling``: (the trajectories to train on, every one sampled). Groups
        whose rewards are all equal are dropped and refilled with tasks this step has not drawn yet
        (this rank's share of them, in a seeded order), sampled and judged round by round."""
        ds = self.cfg.algorithm.dynamic_sampling
        if not ds.enable:
            return trajs, trajs
        t0 = time.perf_counter()
        drawn = [t.id for t in self._step_tasks(step)]
        rest = refill_order(self.tasks, drawn, lambda t: t.id, step_seed(self.cfg.seed, "refill", step))
        pool = self._my_share(rest)

        def more(n: int) -> list[Trajectory]:
            tasks, pool[:] = pool[:n], pool[n:]
            new = self._rollout(step, tasks) if tasks else []
            for k, v in self.judge.score(new).items():
                m[k] = m.get(k, 0.0) + v
            return new

        target = len({t.task_id for t in trajs})
        keep, sampled, stats = fill_groups(
            trajs, more, target=target, max_rounds=ds.max_rounds, normalize=self.cfg.judge.normalize
        )
        m.update(stats)
        m["timing_s/refill"] = time.perf_counter() - t0  # the refill rounds' rollouts and judging
        return keep, sampled

    def _save_trajectories(self, step: int, trajs: list[Trajectory]) -> None:
        """Stamp the step on this rank's trajectories; rank 0 writes every rank's, judged."""
        for t in trajs:
            t.info["step"] = step
        everyone = [t for part in all_gather_objects(trajs) for t in part]
        if is_main():
            write_trajectories(RunDir(self.out).trajectory_file(step), everyone)


class StepJudge:
    """The run's one judge: built from the config's ``judge`` section (verdict cache, majority vote,
    concurrency and every other ``JudgeConfig`` field), used every step, closed at the end."""

    def __init__(self, config: TrainJudgeConfig) -> None:
        self.config = config
        self.rubric = load_rubric(config.rubric) if config.rubric else None
        if config.model is None and self.rubric is not None and not self.rubric.is_deterministic:
            raise ConfigError("judge.rubric has LLM criteria: set judge.model")
        self.judge = make_judge(config)

    def score(self, trajs: list[Trajectory]) -> dict[str, float]:
        """Score, in place, the trajectories the env left to the LLM judge (all of them when
        ``judge.rubric`` overrides the tasks' rubrics), recording the rubric used on each; returns
        judge metrics."""
        pending = trajs if self.rubric is not None else [t for t in trajs if t.info.get("needs_judge")]
        if not pending:
            return {}
        if self.config.model is None and self.rubric is None:
            raise ConfigError("these rubrics need the LLM judge: set judge.model")
        items = [(t, resolve_rubric(t, self.rubric)) for t in pending]
        for (t, rubric), bd in zip(items, run_sync(self.judge.score_many(items)), strict=True):
            record_reward(t, bd, rubric)
        return {
            "judge/calls": float(sum(t.reward.calls for t in pending if t.reward)),
            "judge/cache_hits": float(sum(t.reward.cache_hits for t in pending if t.reward)),
        }

    def close(self) -> None:
        """Close the judge (its verdict cache and call workers)."""
        self.judge.close()
