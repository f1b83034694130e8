"""The training loop: rollout → judge → expand → advantages → update → log, one step at a time.

``Trainer(cfg).run()`` builds (or resumes) everything from a ``TrainConfig``, optionally warm-starts
the policy on oracle trajectories, then runs ``cfg.steps`` RL steps. Every step's trajectories are
saved as JSONL, its metrics appended to ``metrics.jsonl`` (verl's metric names), and checkpoints
written every ``checkpoint_every`` steps. Randomness is derived from (seed, step), so a resumed run
continues exactly as an uninterrupted one would have.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import json
import math
import random
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentrl.algos import AdaptiveKLController, FixedKLController, masked_mean
from agentrl.env import ResearchEnv
from agentrl.errors import ConfigError
from agentrl.learn.forward import chunked_forward, forward_logprobs, forward_values
from agentrl.learn.models import ValueModel, build_tiny_model, frozen_copy
from agentrl.rollout.episode import EpisodeSpec, Limits, run_episodes
from agentrl.rundir import SHARDED, RunDir
from agentrl.seeds import stable_seed
from agentrl.tokens import Expander
from agentrl.train.checkpoint import load_checkpoint, save_checkpoint
from agentrl.train.config import TrainConfig
from agentrl.train.distributed import (
    all_gather_objects,
    all_reduce_sum,
    barrier,
    broadcast_parameters,
    init_distributed,
    is_main,
    rank,
    world_size,
)
from agentrl.train.fsdp import full_params, load_sharded, set_grad_divide, shard_model, sharded_state
from agentrl.train.generate import hf_generate_batch
from agentrl.train.report import RunLog
from agentrl.train.scoring import StepJudge, build_batch, normalized_reward
from agentrl.train.sft import collect_oracle_trajectories, sft_step
from agentrl.train.sources import opened_sources, page_kinds
from agentrl.train.token_log import collect_token_stats
from agentrl.train.update import compute_advantages, update_actor, update_critic
from agentrl.trajectory import Trajectory, write_trajectories

__all__ = ["Trainer"]


def _seed(*parts: Any) -> int:
    return stable_seed(*parts, bits=31)


def _mean_over_ranks(metrics: dict[str, float]) -> dict[str, float]:
    """Average each metric over the ranks that reported it (counts such as drops are summed)."""
    parts = all_gather_objects(metrics)
    if len(parts) == 1:
        return metrics
    out: dict[str, float] = {}
    for key in sorted({k for p in parts for k in p}):
        vals = [p[key] for p in parts if key in p]
        summed = key.startswith(("train/dropped", "train/tokens", "judge/"))
        out[key] = float(sum(vals)) if summed else float(sum(vals) / len(vals))
    return out


class Trainer:
    """Owns the models, optimisers, env pool and logs of one run (see the module docstring)."""

    def __init__(self, cfg: TrainConfig, *, progress: bool = True) -> None:
        self.cfg = cfg
        self.out = Path(cfg.output_dir)
        self.progress = progress
        self.step = 0

    # ---- setup ---------------------------------------------------------------------------------
    def _device(self) -> torch.device:
        ddp_device = init_distributed()
        if ddp_device is not None:
            return ddp_device
        if self.cfg.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.cfg.device)

    def _env_config(self) -> dict[str, Any]:
        r = self.cfg.rollout
        env = json.loads(json.dumps(r.env))  # a deep copy
        env.setdefault("suite", r.suite)
        env.setdefault("budgets", {}).setdefault("max_turns", r.max_turns)
        return env

    def setup(self, resume: bool = False) -> None:
        """Build the tokenizer, models, optimisers and env pool; restore a checkpoint when resuming."""
        cfg = self.cfg
        self.out.mkdir(parents=True, exist_ok=True)
        random.seed(cfg.seed)
        np.random.seed(cfg.seed % 2**32)
        torch.manual_seed(cfg.seed)
        self.device = self._device()
        self.env_config = self._env_config()
        probe = ResearchEnv(self.env_config)
        self.tasks = probe.suite.tasks
        self.page_kinds = page_kinds(probe.suite)
        if not self.tasks:
            raise ConfigError(f"rollout.suite {cfg.rollout.suite!r} has no tasks")
        from agentrl.rollout.ray_env import make_env_factory

        r = cfg.rollout  # rollout.backend: local envs, or proxies of envs living in Ray actors
        self.new_env = make_env_factory(
            self.env_config, r.backend, workers=r.ray_workers, address=r.ray_address, threads=r.env_workers
        )
        self.envs: list[Any] = [probe] if r.backend == "local" else []
        self.pool = cf.ThreadPoolExecutor(
            max_workers=cfg.rollout.env_workers, thread_name_prefix="agentrl-env"
        )
        self.sft_data: list[Trajectory] = []
        if cfg.sft_steps > 0 and not resume:
            tasks = random.Random(_seed(cfg.seed, "sft")).sample(self.tasks, len(self.tasks))
            self.sft_data = collect_oracle_trajectories(
                self.env_config, tasks, cfg.sft_noise, cfg.seed, episodes=cfg.sft_episodes
            )
        if is_main():
            self.tokenizer = self._tokenizer(resume)
        barrier()
        if not is_main():  # the other ranks load what rank 0 trained or loaded
            self.tokenizer = self._tokenizer(resume=True)
        self.stop_ids = {self.tokenizer.convert_tokens_to_ids(self.tokenizer.eos_token)}
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.expander = Expander(self.tokenizer, max_len=cfg.rollout.max_len)
        self.judge = StepJudge(cfg.judge)  # one judge for the run, closed by run()
        self.model = self._policy().to(self.device)
        a = cfg.algorithm
        self.lora = cfg.model.lora_rank > 0
        # With LoRA the reference is the base model, i.e. the policy with its adapters disabled.
        self.uses_ref = a.kl_in_reward or a.kl_loss_coef > 0
        self.ref = frozen_copy(self.model) if self.uses_ref and not self.lora else None
        self.critic = None
        if a.name == "ppo":
            self.critic = ValueModel.from_policy(self.model, shared=cfg.model.critic_backbone == "shared")
            self.critic.to(self.device)
            broadcast_parameters(self.critic)
        self.fsdp = cfg.parallelism == "fsdp" and world_size() > 1
        if self.fsdp:
            self._shard()
        o = cfg.optim
        self.opt = torch.optim.AdamW(
            [p for p in self.model.parameters() if p.requires_grad],
            lr=o.lr,
            betas=o.betas,
            weight_decay=o.weight_decay,
        )
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, self._lr_lambda)
        self.critic_opt = None
        if self.critic is not None:
            self.critic_opt = torch.optim.AdamW(
                [p for p in self.critic.parameters() if p.requires_grad],
                lr=o.critic_lr,
                betas=o.betas,
                weight_decay=o.weight_decay,
            )
        self.kl_ctrl = (
            AdaptiveKLController(a.kl_coef, a.kl_target, a.kl_horizon)
            if a.kl_target is not None
            else FixedKLController(a.kl_coef)
        )
        self.log = RunLog(self.out) if is_main() else None
        if resume:
            self._restore()

    def _shard(self) -> None:
        """FSDP2: every rank starts from rank 0's weights, then keeps only its shards of the policy,
        the reference and the critic (see ``agentrl.train.fsdp``)."""
        if self.critic is not None and self.cfg.model.critic_backbone == "shared":
            raise ConfigError("parallelism: fsdp needs model.critic_backbone: separate")
        mixed = self.device.type == "cuda"
        for module in (self.model, self.ref, self.critic):
            if module is not None:
                broadcast_parameters(module)
                shard_model(module, mixed_precision=mixed)

    def _tokenizer(self, resume: bool) -> Any:
        from transformers import AutoTokenizer

        cfg = self.cfg.model
        saved = RunDir(self.out).tokenizer_dir
        if resume and saved.exists():
            return AutoTokenizer.from_pretrained(saved)
        if cfg.tokenizer or not cfg.path.startswith("tiny:"):
            tok = AutoTokenizer.from_pretrained(cfg.tokenizer or cfg.path)
            tok.save_pretrained(saved)  # the run directory is self-contained for replay/explain/report
            return tok
        from agentrl.train.tokenizer import train_chat_tokenizer

        data = self.sft_data or collect_oracle_trajectories(
            self.env_config, self.tasks[: min(len(self.tasks), 64)], 0.5, self.cfg.seed
        )
        texts = [m.text for t in data for m in t.messages] * 2
        tok = train_chat_tokenizer(texts, cfg.tokenizer_vocab_size)
        tok.save_pretrained(saved)
        return tok

    def _policy(self) -> torch.nn.Module:
        cfg = self.cfg.model
        if cfg.path.startswith("tiny:"):
            model = build_tiny_model(len(self.tokenizer), cfg.path, seed=self.cfg.seed)
        else:
            from transformers import AutoModelForCausalLM

            # "auto" keeps float32 master weights; on a GPU the forward passes run under bf16 autocast.
            dtype = {
                "auto": torch.float32,
                "float32": torch.float32,
                "bfloat16": torch.bfloat16,
                "float16": torch.float16,
            }
            model = AutoModelForCausalLM.from_pretrained(cfg.path, dtype=dtype[cfg.dtype])
        if cfg.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        if cfg.lora_rank > 0:
            try:
                from peft import LoraConfig, get_peft_model
            except ImportError:
                raise ConfigError("model.lora_rank > 0 needs peft: pip install peft") from None
            model = get_peft_model(model, LoraConfig(r=cfg.lora_rank, lora_alpha=2 * cfg.lora_rank))
        return model

    def _lr_lambda(self, step: int) -> float:
        o, total = self.cfg.optim, max(self.cfg.steps, 1)
        if step < o.warmup_steps:
            return (step + 1) / (o.warmup_steps + 1)
        frac = (step - o.warmup_steps) / max(total - o.warmup_steps, 1)
        if o.schedule == "cosine":
            return 0.5 * (1 + math.cos(math.pi * min(frac, 1.0)))
        if o.schedule == "linear":
            return max(0.0, 1.0 - frac)
        return 1.0

    # ---- checkpoints ----------------------------------------------------------------------------
    def _sharded_modules(self) -> dict[str, tuple[torch.nn.Module, Any]]:
        mods: dict[str, tuple[torch.nn.Module, Any]] = {"model": (self.model, self.opt)}
        if self.critic is not None:
            mods["critic"] = (self.critic, self.critic_opt)
        if self.ref is not None:
            mods["ref"] = (self.ref, None)
        return mods

    def save(self) -> Path | None:
        """Write a checkpoint of the current step; call it on every rank (FSDP ranks each write their
        shards with ``torch.distributed.checkpoint``; otherwise rank 0 writes everything)."""
        directory = RunDir(self.out).checkpoints_dir
        state: dict[str, Any] = {
            "scheduler": self.sched.state_dict(),
            "kl_coef": self.kl_ctrl.value,
            "config": self.cfg.model_dump(mode="json"),
        }
        if self.fsdp:
            state["sharded"] = True
            return save_checkpoint(
                directory, self.step, state, sharded=sharded_state(self._sharded_modules())
            )
        if not is_main():
            return None
        state["model"] = self.model.state_dict()
        state["optimizer"] = self.opt.state_dict()
        if self.critic is not None and self.critic_opt is not None:
            state["critic"] = self.critic.state_dict()
            state["critic_optimizer"] = self.critic_opt.state_dict()
        if self.ref is not None:
            state["ref"] = self.ref.state_dict()
        return save_checkpoint(directory, self.step, state)

    def _restore(self) -> None:
        path = RunDir(self.out).latest_checkpoint()
        if path is None:
            raise ConfigError(f"--resume: no checkpoint under {RunDir(self.out).checkpoints_dir}")
        state = load_checkpoint(path)
        if bool(state.get("sharded")) != self.fsdp:
            raise ConfigError(
                f"--resume: {path} was written with parallelism {'fsdp' if state.get('sharded') else 'ddp'}; "
                f"resume it the same way"
            )
        if self.fsdp:
            load_sharded(path / SHARDED, self._sharded_modules())
        else:
            self.model.load_state_dict(state["model"])
            self.opt.load_state_dict(state["optimizer"])
            if self.critic is not None and "critic" in state:
                self.critic.load_state_dict(state["critic"])
                self.critic_opt.load_state_dict(state["critic_optimizer"])
            if self.ref is not None and "ref" in state:
                self.ref.load_state_dict(state["ref"])
        self.sched.load_state_dict(state["scheduler"])
        self.kl_ctrl.value = state["kl_coef"]
        self.step = state["step"]
        if self.log is not None:
            self.log.truncate_after(self.step)

    # ---- one RL step ------------------------------------------------------------------------------
    def _jobs(self, step: int) -> list[EpisodeSpec]:
        r = self.cfg.rollout
        rng = random.Random(_seed(self.cfg.seed, "tasks", step))
        tasks = rng.sample(self.tasks, min(r.tasks_per_step, len(self.tasks)))
        # Contiguous blocks of whole groups per rank: rank 0's rows, then rank 1's, … are the rows of
        # one process in its order, which the mini-batches' global row numbering relies on.
        n, ranks, me = len(tasks), world_size(), rank()
        mine = tasks[me * n // ranks : (me + 1) * n // ranks]
        specs = []
        for t in mine:
            for s in range(r.group_size):
                seed = _seed(self.cfg.seed, step, t.id, s)
                specs.append(EpisodeSpec(f"{t.id}#{s}", t, seed, {"sample": s, "seed": seed}))
        return specs

    def _rollout(self, jobs: list[EpisodeSpec]) -> list[Trajectory]:
        """The step's episodes through the episode loop: the HF sampler in lock-step, or vLLM."""
        r = self.cfg.rollout
        limits = Limits(max_new_tokens=r.max_new_tokens, max_len=r.max_len)
        loop = dict(expander=self.expander, stop_ids=self.stop_ids, limits=limits, executor=self.pool)
        if r.engine == "vllm":
            from agentrl.train.vllm_engine import vllm_engine

            results = vllm_engine(self).run_episodes(
                self.envs, jobs, temperature=r.temperature, top_p=r.top_p, **loop
            )
        else:  # FSDP: the weights are gathered once, so ranks may sample different lengths.
            with full_params(self.model):
                gen = hf_generate_batch(
                    self.model,
                    stop_ids=self.stop_ids,
                    pad_id=self.pad_id,
                    temperature=r.temperature,
                    top_p=r.top_p,
                )
                results = asyncio.run(run_episodes(self.envs, jobs, generate_batch=gen, **loop))
        return [res.trajectory for res in results]

    def _ref_logprobs(self, batch: dict[str, torch.Tensor], temperature: float) -> torch.Tensor:
        pack = self.cfg.algorithm.pack_sequences
        if self.ref is not None:
            return forward_logprobs(self.ref, batch, temperature, pack=pack, policy_only=True)[0]
        with self.model.disable_adapter():  # peft: the base model is the reference
            return forward_logprobs(self.model, batch, temperature, pack=pack, policy_only=True)[0]

    def _log_tokens(self, step: int, ids: list[str], batch: dict[str, torch.Tensor]) -> None:
        """Keep the per-token numbers of this update (``tokens/step_NNNNN.npz``, for explain/report)."""
        merged: dict[str, Any] = {}
        for part in all_gather_objects(collect_token_stats(ids, batch)):
            merged.update(part)
        if is_main():
            RunDir(self.out).write_token_stats(step, merged)

    def train_step(self) -> dict[str, float]:
        """Run one RL step (the ``self.step + 1``-th) and return its metrics."""
        cfg, r, a = self.cfg, self.cfg.rollout, self.cfg.algorithm
        step = self.step + 1
        m: dict[str, float] = {"step": float(step)}
        t0 = time.perf_counter()
        jobs = self._jobs(step)
        while len(self.envs) < len(jobs):
            self.envs.append(self.new_env())
        trajs = self._rollout(jobs)
        t1 = time.perf_counter()
        m.update(self.judge.score(trajs))
        t2 = time.perf_counter()
        for t in trajs:
            t.info["step"] = step
        everyone = [t for part in all_gather_objects(trajs) for t in part]
        if is_main():
            write_trajectories(RunDir(self.out).trajectory_file(step), everyone)
        keep, batch, stats = build_batch(
            trajs, self.expander, normalize=cfg.judge.normalize, pad_id=self.pad_id, device=self.device
        )
        m.update(stats)
        t3 = time.perf_counter()
        scored = [t for t in trajs if t.reward is not None and t.reward.total is not None]
        m["critic/score/mean"] = float(np.mean([t.reward.total for t in scored])) if scored else 0.0
        m["critic/score/normalized_mean"] = (
            float(np.mean([normalized_reward(t) for t in scored])) if scored else 0.0
        )
        m["env/num_turns/mean"] = float(np.mean([t.info.get("turns", 0) for t in trajs]))
        m["env/tool_calls/mean"] = float(np.mean([t.info.get("tool_calls", 0) for t in trajs]))
        m["env/answered/frac"] = float(np.mean([bool(t.info.get("terminated")) for t in trajs]))
        m["env/format_errors/mean"] = float(np.mean([t.info.get("format_errors", 0) for t in trajs]))
        m.update(opened_sources(trajs, self.page_kinds))
        # The update's collectives need every rank: if any rank has nothing trainable this step
        # (every trajectory a judge error, say), all ranks skip the update rather than hang.
        empty_ranks = all_reduce_sum(0.0 if batch else 1.0)
        m["train/skipped_update"] = float(empty_ranks > 0)
        if empty_ranks == 0:
            gen = torch.Generator().manual_seed(_seed(cfg.seed, "update", step))
            mask = batch["loss_mask"]
            T, budget, pack = r.temperature, a.micro_batch_tokens, a.pack_sequences
            with full_params(self.model):
                recomputed = chunked_forward(
                    lambda b: forward_logprobs(self.model, b, T, pack=pack, policy_only=True)[0],
                    batch,
                    budget,
                    pack,
                )
            known = batch["known_logprobs"].to(self.device).bool() & mask.bool()
            if known.any():
                m["actor/rollout_logprob_diff"] = (
                    (recomputed - batch["old_logprobs"])[known].abs().mean().item()
                )
            use_rollout = a.recompute_old_logprobs == "never" or (
                a.recompute_old_logprobs == "auto" and r.top_p == 1.0
            )
            batch["old_logprobs"] = torch.where(known & use_rollout, batch["old_logprobs"], recomputed)
            if self.uses_ref:
                with full_params(self.ref if self.ref is not None else self.model):
                    batch["ref_logprobs"] = chunked_forward(
                        lambda b: self._ref_logprobs(b, T), batch, budget, pack
                    )
            if self.critic is not None:
                with full_params(self.critic):
                    batch["values"] = chunked_forward(
                        lambda b: forward_values(self.critic, b, pack=pack), batch, budget, pack
                    )
            m.update(compute_advantages(batch, a, [t.task_id for t in keep], self.kl_ctrl))
            if cfg.log_token_stats:
                self._log_tokens(step, [t.id for t in keep], batch)
            t4 = time.perf_counter()
            m.update(
                update_actor(self.model, self.opt, batch, a, temperature=r.temperature, norm=r.max_len,
                             grad_clip=cfg.optim.grad_clip, generator=gen)
            )  # fmt: skip
            if self.critic is not None:
                m.update(
                    update_critic(self.critic, self.critic_opt, batch, a, norm=r.max_len,
                                  grad_clip=cfg.optim.grad_clip, generator=gen)
                )  # fmt: skip
            with warnings.catch_warnings():  # the optimiser skips steps with no signal (zero gradient)
                warnings.filterwarnings("ignore", "Detected call of `lr_scheduler.step", UserWarning)
                self.sched.step()
            if r.engine == "vllm":  # rank 0 pushes the new weights; every rank waits for it
                from agentrl.train.vllm_engine import vllm_engine

                vllm_engine(self).sync(self.model, step)
            m["actor/lr"] = self.sched.get_last_lr()[0]
            m["response_length/mean"] = masked_mean(mask.sum(-1).float(), torch.ones_like(mask[:, 0])).item()
            m["prompt_length/mean"] = batch["prompt_len"].float().mean().item()
            m["train/tokens"] = float(batch["attention_mask"].sum())
            t5 = time.perf_counter()
            m["timing_s/adv"], m["timing_s/update"] = t4 - t3, t5 - t4
            m["perf/tokens_per_s"] = m["train/tokens"] / max(t5 - t0, 1e-9)
        m["timing_s/rollout"], m["timing_s/judge"], m["timing_s/expand"] = t1 - t0, t2 - t1, t3 - t2
        m["timing_s/step"] = time.perf_counter() - t0
        self.step = step
        return _mean_over_ranks(m)

    # ---- the run -------------------------------------------------------------------------------
    def warm_start(self) -> None:
        """``sft_steps`` supervised steps on the oracle trajectories collected at setup; then every
        rank takes rank 0's weights, and the reference becomes the warm-started policy."""
        cfg = self.cfg
        if self.sft_data:
            # Every rank trains on the same batches: under FSDP their summed gradients are averaged.
            set_grad_divide(self.model, world_size())
            opt = torch.optim.AdamW(self.model.parameters(), lr=cfg.sft_lr)
            rng = random.Random(_seed(cfg.seed, "sft-batches"))
            for k in range(cfg.sft_steps):
                loss = sft_step(
                    self.model, opt, self.expander, self.sft_data, batch_size=16, rng=rng, pad_id=self.pad_id
                )
                if self.log is not None:
                    self.log.sft(k + 1, loss)
            set_grad_divide(self.model, 1.0)
        if not self.fsdp:  # sharded ranks stay equal by construction
            broadcast_parameters(self.model)
        if self.ref is not None:
            self.ref.load_state_dict(self.model.state_dict())

    def run(self, resume: bool = False) -> dict[str, Any]:
        """Set up, warm-start (fresh runs), train ``cfg.steps`` steps; returns the final summary
        (an empty dict on ranks other than 0)."""
        self.setup(resume=resume)
        if not resume:
            self.warm_start()
        if self.log is not None:
            self.log.start(self.cfg, self.progress)
        try:
            while self.step < self.cfg.steps:
                metrics = self.train_step()
                if self.log is not None:
                    self.log.step(metrics)
                every = self.cfg.checkpoint_every
                if every and self.step % every == 0:
                    self.save()
        finally:
            if self.log is not None:
                self.log.stop()
            self.judge.close()
        self.save()
        if self.log is None:
            return {}
        return self.log.finish()
