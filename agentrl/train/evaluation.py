"""The trainer's side of evaluation during training (``eval:``; ``agentrl.eval.during_training`` does
the work): the eval engine, the hooks around the step loop, and the summary's evaluation part.

The eval engine samples the live policy with the run's expander, stop ids and limits, at
``eval.temperature``: an ``HFEngine`` of its own on the trainer's model (whatever sampler the
training steps use), or the run's vLLM server. Evaluations run between steps, never update
anything, and leave the global random states (Python, numpy, torch) as they found them, so a run
with evaluation trains exactly as the same run without it.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from agentrl.eval.during_training import Evaluation, audit_summary, eval_env_config, eval_summary
from agentrl.sampling.engines import hf_engine
from agentrl.sampling.hf import EpisodeLoop
from agentrl.train.config import TrainConfig
from agentrl.train.distributed import all_gather_objects, is_main, world_size
from agentrl.train.run_sampling import run_sampling

# ``Trainer`` below is ``agentrl.train.trainer.Trainer``, which imports this module.
Trainer = Any

__all__ = [
    "check_evaluation",
    "evaluate_after_step",
    "evaluate_before_rl",
    "make_evaluation",
    "preserved_rng",
]


@contextmanager
def preserved_rng() -> Iterator[None]:
    """Restore Python's, numpy's and torch's global random states on exit."""
    py, npy, cpu = random.getstate(), np.random.get_state(), torch.get_rng_state()
    cuda = (
        torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    )
    try:
        yield
    finally:
        random.setstate(py)
        np.random.set_state(npy)
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


def check_evaluation(cfg: TrainConfig, env_config: dict[str, Any]) -> None:
    """Before anything is built: the eval suite and split exist (``ConfigError`` naming the splits
    there are), and the audit rubric loads."""
    if cfg.eval.runs:
        eval_env_config(cfg.eval, env_config)
    if cfg.eval.audit is not None and cfg.eval.audit.rubric:
        from agentrl.judge import load_rubric

        load_rubric(cfg.eval.audit.rubric)


def _engine_rollout(trainer: Trainer) -> Any:
    """The eval episodes' rollout function: the live policy at ``eval.temperature``."""
    r = trainer.cfg.rollout
    how = run_sampling(trainer.cfg, trainer.sampling)  # as ``agentrl rollout --policy hf:RUN`` reads it
    loop = EpisodeLoop(how.spec, trainer.expander, trainer.pool, how.context_policy())
    if r.engine == "vllm":  # the run's server, with the evaluation's loop
        return trainer.engine.rollout_with(loop)
    cache = r.kv_cache_tokens if r.kv_cache else 0
    engine = hf_engine(
        trainer.model, replace(loop), pad_id=trainer.pad_id, kv_cache_tokens=cache, threads=r.sampling_threads
    )
    return engine.rollout


def make_evaluation(trainer: Trainer) -> Evaluation | None:
    """The run's ``Evaluation`` (None when ``eval:`` neither evaluates nor audits training steps)."""
    cfg = trainer.cfg
    audits = cfg.eval.audit is not None and cfg.eval.audit.every > 0
    if not cfg.eval.runs and not audits:
        return None
    r = cfg.rollout
    return Evaluation(
        cfg.eval,
        run_dir=trainer.out,
        env_config=trainer.env_config,
        rollout=_engine_rollout(trainer),
        score=trainer.judge.score,
        batch=r.tasks_per_step * r.group_size,
        steps=cfg.steps,
        seed=cfg.seed,
        ranks=world_size(),
        share=trainer._my_share,
        gather=all_gather_objects,
        main=is_main(),
        note=trainer.report.note,
    )


def evaluate_before_rl(trainer: Trainer) -> None:
    """``eval.before_train``: evaluate the policy RL starts from, logged as step 0 (fresh runs)."""
    ev = trainer.evaluation
    if ev is None or not trainer.cfg.eval.before_train:
        return
    with trainer.report.phase(f"evaluation before RL ({len(ev.specs(0))} episodes)"), preserved_rng():
        m = ev.evaluate(0)
    if trainer.log is not None:
        trainer.log.step({"step": 0, **m})


def evaluate_after_step(trainer: Trainer, step: int) -> dict[str, float]:
    """The evaluation (and audit) due after RL step ``step``: their metrics, for the step's row."""
    ev = trainer.evaluation
    if ev is None:
        return {}
    m: dict[str, float] = {}
    with preserved_rng():
        if ev.due(step):
            trainer.report.step_phase(step, "eval")
            m |= ev.evaluate(step)
        if is_main() and ev.audit_due(step):
            trainer.report.step_phase(step, "audit")
            audit = ev.audit_step(step)
            # one flag for the step: either series' check that fired sets it (the training series'
            # check must not overwrite the evaluation's)
            if "audit/divergence" in m and "audit/divergence" in audit:
                audit["audit/divergence"] = max(m["audit/divergence"], audit["audit/divergence"])
            m |= audit
    return m


def summary_extra(trainer: Trainer) -> dict[str, Any]:
    """What evaluation adds to ``summary.json``: ``eval_before``, ``eval_after``, ``eval_gain`` and
    ``audit`` (see ``agentrl.eval.during_training``)."""
    ev, log = trainer.evaluation, trainer.log
    if ev is None or log is None:
        return {}
    e = trainer.cfg.eval
    out = eval_summary(ev.run, trainer.step, kinds=ev.kinds, pass_threshold=e.pass_threshold,
                       n_boot=e.n_boot, seed=e.seed)  # fmt: skip
    if audit := audit_summary(log.rows):
        out["audit"] = audit
    return out
