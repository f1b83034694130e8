"""The training loop: rollout → judge → expand → advantages → update → log, one step at a time.

``Trainer(cfg).run()`` checks the config's inputs and output directory before anything is built
(``agentrl.train.preflight``), builds (or resumes) everything from a ``TrainConfig``, optionally
warm-starts the policy on oracle trajectories, then runs ``cfg.steps`` RL steps, showing each phase
as it goes (``agentrl.train.progress``). The models are built by ``agentrl.train.build``, episodes
sampled by the rollout engine chosen at setup (``agentrl.train.engines.make_engine``, over the
sampling layer ``agentrl.sampling``), checkpoints written as a ``TrainState``
(``agentrl.train.checkpoint``) when ``agentrl.train.checkpointing`` says, the warm start by
``agentrl.train.warm_start``. ``train_step`` reads as its numbered phases, and its data path as
three files: this one, ``step_sampling`` (tasks, rollout, judge, refills) and ``update``
(advantages, the actor and critic updates). Every step's trajectories are saved as JSONL, its metrics appended to ``metrics.jsonl`` (verl's metric names), and checkpoints
written during and after the warm start and every ``checkpoint_every`` steps. Randomness is derived
from (seed, step), so a resumed run continues exactly as an uninterrupted one would have. The run
holds its directory's lock (``agentrl.runlock``) from its checks to its end.
"""

from __future__ import annotations

import concurrent.futures as cf
import random
import time
import warnings
from copy import deepcopy
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentrl.env import ResearchEnv
from agentrl.env.sources import page_kinds
from agentrl.errors import ConfigError
from agentrl.learn.batch import build_batch, row_ids
from agentrl.learn.forward import chunked_forward, forward_logprobs, forward_values
from agentrl.ranks import world_size
from agentrl.rollout.context import context_policy
from agentrl.rundir import RunDir, write_json
from agentrl.sampling.engines import EpisodeLoop, RolloutEngine
from agentrl.sampling.overlap import OneStepOffPolicy, Presampled
from agentrl.sampling.threads import describe as describe_threads
from agentrl.stopping import RunInterrupted, check_stop, stop_requested, stops_on_signals
from agentrl.tokens import sampling_spec
from agentrl.train.build import build_models, load_tokenizer, tokenizer_source
from agentrl.train.checkpointing import Checkpointing
from agentrl.train.config import TrainConfig
from agentrl.train.distributed import all_gather_objects, all_reduce_sum, barrier, init_distributed, is_main
from agentrl.train.engines import make_engine
from agentrl.train.evaluation import (
    check_evaluation,
    evaluate_after_step,
    evaluate_before_rl,
    make_evaluation,
    summary_extra,
)
from agentrl.train.fsdp import full_params
from agentrl.train.health import HealthWatch, health_metrics
from agentrl.train.preflight import check_run, hold_output_dir, setting_up
from agentrl.train.progress import Progress, make_progress
from agentrl.train.report import RunLog
from agentrl.train.sft import collect_oracle_trajectories
from agentrl.train.step_metrics import batch_metrics, mean_over_ranks, rollout_metrics
from agentrl.train.step_sampling import StepJudge, StepSampling, step_seed
from agentrl.train.token_log import collect_token_stats
from agentrl.train.update import compute_advantages, update_actor, update_critic
from agentrl.train.warm_start import WarmStart
from agentrl.trajectory import Trajectory

__all__ = ["Trainer"]


def _no_envs(n: int) -> list[Any]:
    return []


class Trainer(StepSampling, Checkpointing, WarmStart):
    """Owns the env pool, models, engine, judge and logs of one run (see the module docstring)."""

    def __init__(self, cfg: TrainConfig, *, progress: bool = True) -> None:
        self.cfg = cfg
        self.out = Path(cfg.output_dir)
        self.progress = progress  # a live display on a terminal; plain lines otherwise (or when False)
        self.report: Progress = Progress()
        self.step = 0
        self.health = HealthWatch()  # warns when RL has nothing to learn from (agentrl.train.health)
        self.warm_from: int | None = 0  # the warm start goes on after this step; None: none left
        self.checkpoint_seconds: list[float] = []

    # ---- setup ---------------------------------------------------------------------------------
    def _device(self) -> torch.device:
        ddp_device = init_distributed()
        if ddp_device is not None:
            return ddp_device
        if self.cfg.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.cfg.device)

    def _env_config(self) -> dict[str, Any]:
        return self.cfg.rollout.env_config()

    def setup(self, resume: bool = False) -> None:
        """Build the env pool, tokenizer, models, optimisers and rollout engine; restore a checkpoint
        when resuming."""
        cfg, r = self.cfg, self.cfg.rollout
        resume_from = self.resume_point(resume)  # and warm_from: a warm start left to run, or none
        if resume and resume_from is None:
            raise ConfigError(f"--resume: no checkpoint under {RunDir(self.out).checkpoints_dir}")
        random.seed(cfg.seed)
        np.random.seed(cfg.seed % 2**32)
        torch.manual_seed(cfg.seed)
        self.device = self._device()
        if is_main() and type(self.report) is Progress:
            self.report = make_progress(self.progress)
        if r.torch_threads is not None:
            torch.set_num_threads(r.torch_threads)
        self.env_config = self._env_config()
        probe = ResearchEnv(self.env_config)
        self.tasks = probe.tasks
        self.page_kinds = page_kinds(probe.suite)
        if not self.tasks:
            raise ConfigError(f"rollout.suite {r.suite!r} has no tasks")
        from agentrl.rollout.ray_env import make_env_factory

        # rollout.backend: local envs, or proxies of envs living in Ray actors
        self.new_env = make_env_factory(
            self.env_config, r.backend, workers=r.ray_workers, address=r.ray_address, threads=r.env_workers
        )
        self.envs: list[Any] = [probe] if r.backend == "local" else []
        self.pool = cf.ThreadPoolExecutor(max_workers=r.env_workers, thread_name_prefix="agentrl-env")
        self.sft_data: list[Trajectory] = []
        self._presampled: Presampled | None = None
        if cfg.sft_steps > 0 and self.warm_from is not None:
            tasks = random.Random(step_seed(cfg.seed, "sft")).sample(self.tasks, len(self.tasks))
            with self.report.phase(f"oracle episodes for the warm start ({cfg.sft_episodes})"):
                self.sft_data = collect_oracle_trajectories(
                    self.env_config, tasks, cfg.sft_noise, cfg.seed, episodes=cfg.sft_episodes
                )
        saved = RunDir(self.out).tokenizer_dir
        if is_main():
            self.out.mkdir(parents=True, exist_ok=True)
            with self.report.phase(f"tokenizer ({tokenizer_source(cfg, saved, resume)})"):
                self.tokenizer = load_tokenizer(cfg, saved, resume, self._tokenizer_texts)
        barrier()
        if not is_main():  # the other ranks load what rank 0 trained or loaded
            self.tokenizer = load_tokenizer(cfg, saved, True, self._tokenizer_texts)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.judge = StepJudge(cfg.judge)  # one judge for the run, closed by run()
        with self.report.phase(f"models ({cfg.model.path}, {cfg.algorithm.name})"):
            self.models = build_models(cfg, len(self.tokenizer), self.device)
        # The run's sampling spec: a turn ends on the template's end-of-turn ids ∪ the model's EOS ids,
        # and the expander the spec builds treats the same ids as a turn's end; recorded for replay.
        self.sampling = sampling_spec(
            self.tokenizer,
            generation_config=getattr(self.models.policy, "generation_config", None),
            max_len=r.max_len,
            max_new_tokens=r.max_new_tokens,
            temperature=r.temperature,
            top_p=r.top_p,
        )
        self.stop_ids = set(self.sampling.stop_ids)
        self.expander = self.sampling.expander(self.tokenizer)
        self.log = RunLog(self.out) if is_main() else None
        if is_main():
            write_json(RunDir(self.out).sampling_file, self.sampling.to_json())
        if self.sft_data and r.context.strategy != "none":
            self.oracle_in_tokens(tasks)  # the warm start's data as the policy will see it
        if self.sft_data:
            self.new_warm_start()
        if resume_from is not None:
            with self.report.phase(f"restoring the latest checkpoint ({resume_from.name})"):
                self._restore(resume_from)
        # staleness 1: a sampler thread tokenizes with a tokenizer of its own (a fast tokenizer shared
        # by two threads can fail with "Already borrowed"); a sampler process has its expander and envs
        in_child = r.staleness == 1 and r.engine == "hf" and r.sampler == "process"
        sampler_expander = (
            self.sampling.expander(deepcopy(self.tokenizer))
            if r.staleness == 1 and not in_child
            else self.expander
        )
        loop = EpisodeLoop(self.sampling, sampler_expander, self.pool, context_policy(r.context))
        self.engine: RolloutEngine = make_engine(
            cfg, self.model, loop, pad_id=self.pad_id, step=self.step, tokenizer=self.tokenizer,
            output_dir=self.out, env_config=self.env_config,
        )  # fmt: skip
        if r.engine == "hf" and r.staleness == 0 and is_main():
            self.report.note(describe_threads(self.model, r.sampling_threads))
        if is_main():
            self.report.note(self.models.checkpointing)
        # rollout.staleness: 1 — step k+1 samples in the background while step k updates
        self.sampler: OneStepOffPolicy | None = None
        if r.staleness == 1:
            envs = _no_envs if in_child else self._envs
            self.sampler = OneStepOffPolicy(
                self.engine, jobs=self._jobs, envs=envs, last_step=cfg.steps, threads=r.torch_threads
            )
            self.sampler.restore(self._presampled)
        self.evaluation = make_evaluation(self)  # ``eval:`` (None when it evaluates nothing)

    def _tokenizer_texts(self) -> list[str]:
        """What a ``tiny:`` model's tokenizer is trained on: oracle trajectories' messages."""
        data = self.sft_data or collect_oracle_trajectories(
            self.env_config, self.tasks[: min(len(self.tasks), 64)], 0.5, self.cfg.seed
        )
        return [m.text for t in data for m in t.messages] * 2

    @property
    def model(self) -> torch.nn.Module:
        return self.models.policy

    @property
    def ref(self) -> torch.nn.Module | None:
        return self.models.ref

    @property
    def critic(self) -> torch.nn.Module | None:
        return self.models.critic

    # ---- one RL step ------------------------------------------------------------------------------
    def _ref_logprobs(self, batch: dict[str, torch.Tensor], temperature: float) -> torch.Tensor:
        pack = self.cfg.algorithm.pack_sequences
        if self.ref is not None:
            return forward_logprobs(self.ref, batch, temperature, pack=pack, policy_only=True)[0]
        with self.model.disable_adapter():  # peft: the base model is the reference
            return forward_logprobs(self.model, batch, temperature, pack=pack, policy_only=True)[0]

    def _forward_passes(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """Old log-probs (the sampler's where they are exact, else recomputed), reference log-probs
        and values, written into ``batch``; returns the sampler-vs-trainer log-prob gap."""
        r, a, m, mask = self.cfg.rollout, self.cfg.algorithm, {}, batch["loss_mask"]
        T, budget, pack = r.temperature, a.micro_batch_tokens, a.pack_sequences
        known = batch["known_logprobs"].to(self.device).bool() & mask.bool()
        use_rollout = not a.rollout_correction.enabled and (
            a.recompute_old_logprobs == "never"
            or (a.recompute_old_logprobs == "auto" and r.top_p == 1.0 and r.staleness == 0)
        )
        # The sampler's log-probs stay in the batch (0 where ``known_logprobs`` is 0) for the rollout
        # correction, which compares them with the trainer's: then old log-probs are recomputed, and so
        # with staleness 1 under "auto" (the sampler's are another version's).
        batch["rollout_logprobs"] = batch["old_logprobs"]
        # "never" with every policy token's log-prob known: no forward pass at all (nor the gap metric)
        if not (use_rollout and a.recompute_old_logprobs == "never" and bool((known == mask.bool()).all())):
            with full_params(self.model):
                recomputed = chunked_forward(
                    lambda b: forward_logprobs(self.model, b, T, pack=pack, policy_only=True)[0],
                    batch,
                    budget,
                    pack,
                )
            if known.any():
                gap = (recomputed - batch["old_logprobs"])[known].abs().mean().item()
                m["actor/rollout_logprob_diff"] = gap
            batch["old_logprobs"] = torch.where(known & use_rollout, batch["old_logprobs"], recomputed)
        if self.models.uses_ref:
            with full_params(self.ref if self.ref is not None else self.model):
                batch["ref_logprobs"] = chunked_forward(
                    lambda b: self._ref_logprobs(b, T), batch, budget, pack
                )
        if self.critic is not None:
            with full_params(self.critic):
                batch["values"] = chunked_forward(
                    lambda b: forward_values(self.critic, b, pack=pack), batch, budget, pack
                )
        return m

    def _update(self, batch: dict[str, torch.Tensor], step: int) -> dict[str, float]:
        """The policy's (and critic's) optimiser steps on ``batch``, then the schedule's step."""
        cfg, r, a, ms = self.cfg, self.cfg.rollout, self.cfg.algorithm, self.models
        gen = torch.Generator().manual_seed(step_seed(cfg.seed, "update", step))
        m = update_actor(self.model, ms.opt, batch, a, temperature=r.temperature, norm=r.max_len,
                         grad_clip=cfg.optim.grad_clip, generator=gen)  # fmt: skip
        if self.critic is not None:
            m.update(
                update_critic(self.critic, ms.critic_opt, batch, a, norm=r.max_len,
                              grad_clip=cfg.optim.grad_clip, generator=gen)
            )  # fmt: skip
        with warnings.catch_warnings():  # the optimiser skips steps with no signal (zero gradient)
            warnings.filterwarnings("ignore", "Detected call of `lr_scheduler.step", UserWarning)
            ms.sched.step()
        return m

    def _log_tokens(self, step: int, ids: list[str], batch: dict[str, torch.Tensor]) -> None:
        """Keep the per-token numbers of this update (``tokens/step_NNNNN.npz``, for explain/report)."""
        merged: dict[str, Any] = {}
        for part in all_gather_objects(collect_token_stats(ids, batch)):
            merged.update(part)
        if is_main():
            RunDir(self.out).write_token_stats(step, merged)

    def train_step(self) -> dict[str, float]:
        """Run one RL step (the ``self.step + 1``-th) and return its metrics."""
        cfg, step = self.cfg, self.step + 1
        m: dict[str, Any] = {"step": step}
        t0 = time.perf_counter()
        # 1. rollout: this rank's episodes through the engine chosen at setup
        self.report.step_phase(step, "rollout")
        trajs = self._rollout(step)
        t1 = time.perf_counter()
        # 2. judge: the run's one judge scores them (dynamic sampling: groups without signal are
        # dropped and refilled, more rounds of 1 and 2); rank 0 saves the trajectories trained on
        self.report.step_phase(step, "judge")
        m.update(self.judge.score(trajs))
        trajs, sampled = self._dynamic_sampling(step, trajs, m)
        t2 = time.perf_counter()
        self._save_trajectories(step, trajs)
        # 3. expand: token rows with the expander's rewards (build_batch only drops and collates)
        keep, batch, stats = build_batch(
            trajs, self.expander, normalize=cfg.judge.normalize, pad_id=self.pad_id, device=self.device
        )
        m.update(stats)
        t3 = time.perf_counter()
        m.update(
            rollout_metrics(sampled, self.page_kinds, step) | health_metrics(sampled, cfg.judge.normalize)
        )
        # The update's collectives need every rank: if any rank has nothing trainable this step
        # (every trajectory a judge error, say), all ranks skip the update rather than hang.
        empty_ranks = all_reduce_sum(0.0 if batch else 1.0)
        m["train/skipped_update"] = float(empty_ranks > 0)
        if empty_ranks == 0:
            self.report.step_phase(step, "update")
            # 4. old and reference log-probs, values
            m.update(self._forward_passes(batch))
            # 5. advantages (and the per-token log of this update)
            m.update(compute_advantages(batch, cfg.algorithm, [t.task_id for t in keep], self.models.kl_ctrl))
            if cfg.log_token_stats:
                self._log_tokens(step, row_ids(keep, batch), batch)
            t4 = time.perf_counter()
            # 6. update: policy, critic, learning-rate schedule
            m.update(self._update(batch, step))
            # 7. sync and log: the engine samples the new weights next; the batch's metrics
            self._after_update(step)
            m.update(batch_metrics(batch, self.models.sched.get_last_lr()[0]))
            t5 = time.perf_counter()
            m["timing_s/adv"], m["timing_s/update"] = t4 - t3, t5 - t4
            m["perf/tokens_per_s"] = m["train/tokens"] / max(t5 - t0, 1e-9)
        m["timing_s/rollout"], m["timing_s/expand"] = t1 - t0, t3 - t2
        m["timing_s/judge"] = t2 - t1 - m.get("timing_s/refill", 0.0)
        m["timing_s/step"] = time.perf_counter() - t0
        self.step = step
        return mean_over_ranks(m)

    # ---- the run -------------------------------------------------------------------------------
    def run(self, resume: bool = False, overwrite: bool = False) -> dict[str, Any]:
        """Check, set up, warm-start (fresh runs), train ``cfg.steps`` steps; returns the final
        summary (an empty dict on ranks other than 0). ``output_dir`` must be new or empty, unless
        ``resume`` (continue its latest checkpoint) or ``overwrite`` (delete the run in it first).
        The run holds the directory's lock throughout; Ctrl-C or SIGTERM ends it at the next stop
        point (within a second in one process; between steps where ranks must agree) with a summary
        marked interrupted (``RunInterrupted``)."""
        with stops_on_signals(inner=world_size() == 1):
            return self._run(resume, overwrite)

    def _run(self, resume: bool, overwrite: bool) -> dict[str, Any]:
        lock = None
        try:
            check_run(self.cfg, resume=resume, overwrite=overwrite)  # before anything is built or written
            check_evaluation(self.cfg, self._env_config())
            lock, start_over = hold_output_dir(self.out, resume=resume, overwrite=overwrite)
            resume, overwrite = resume and not start_over, overwrite or start_over
            with setting_up(self.out, overwrite=overwrite, fresh=bool(lock and lock.created)):
                self.setup(resume=resume)
            if self.warm_from is not None:
                self.warm_start()
            if self.log is not None:
                self.log.start(self.cfg)
            try:
                # before RL step 1: in a fresh run, or a resumed one killed before it had evaluated
                if self.step == 0 and 0 not in RunDir(self.out).eval_files():
                    evaluate_before_rl(self)
                self.report.start_steps(self.cfg.steps, self.step)
                self.health.first = self.step == 0  # the warm-start check is of RL step 1 only
                while self.step < self.cfg.steps:
                    metrics = self.train_step()
                    metrics.update(evaluate_after_step(self, self.step))
                    if self.log is not None:
                        self.log.step(metrics)
                    self.report.step(metrics)
                    for line in self.health.check(metrics):
                        self.report.note(line)
                    every = self.cfg.checkpoint_every
                    if every and self.step % every == 0:
                        self.save()
                    if self.step < self.cfg.steps:  # every rank stops here, between steps (all agree)
                        check_stop(all_reduce_sum(float(stop_requested())) > 0)
            finally:
                if self.log is not None:
                    self.log.stop()
                self.judge.close()
                if self.evaluation is not None:
                    self.evaluation.close()
                (self.sampler or self.engine).close()
            if not self.saved():  # the last periodic checkpoint may be this step's already
                with self.report.phase(f"checkpoint of step {self.step}"):
                    self.save()
            if self.log is None:
                return {}
            with self.report.phase("summary and reward curve"):
                return self.log.finish(summary_extra(self))
        except KeyboardInterrupt as e:
            raise self._interrupted(e) from None
        finally:
            self.report.close()
            if lock is not None:
                lock.release()

    def _interrupted(self, e: KeyboardInterrupt) -> RunInterrupted:
        """Ctrl-C or SIGTERM: a summary and curve of the steps logged, marked interrupted; the error
        says where ``--resume`` goes on from."""
        sig = e.signal if isinstance(e, RunInterrupted) else "SIGINT"
        latest = RunDir(self.out).latest_checkpoint()
        if latest is not None:
            where = f"--resume goes on from checkpoints/{latest.name}"
        elif not self.out.exists():  # stopped in the setup of a fresh run, which removes what it began
            where = "stopped during its setup, so nothing was kept: run the same command again"
        else:
            where = "no checkpoint yet: --resume starts the run over"
        log = getattr(self, "log", None)  # None too when setup did not get that far
        if log is not None:
            try:
                stopped = {"signal": sig, "last_checkpoint": latest.name if latest else None}
                log.finish(summary_extra(self), interrupted=stopped)
            except Exception as err:  # the summary is a courtesy: never hide the interruption behind it
                warnings.warn(f"could not write the interrupted run's summary: {err}", stacklevel=2)
        return RunInterrupted(f"{sig} after step {self.step} ({self.out}); {where}", signal=sig)
