"""How an ``agentrl train`` run samples its evaluation episodes: one typed value, one reader.

Three places sample "as the run did": the trainer's evaluation during training (the live config and
spec), ``agentrl rollout --policy hf:RUN`` (the env it runs in, and its resume check), and
``load_hf_policy`` on a run or one of its checkpoints. They all take a ``RunSampling``:
``run_sampling(cfg, spec)`` builds it from a config and the sampling spec (the trainer's live ones),
``read_run_sampling(path)`` from what a run directory stores — its config read once through
``load_run_config`` (retired keys dropped with a note, anything else invalid an error), its recorded
spec through ``read_sampling_spec`` — for the run, its ``checkpoints/`` or any one checkpoint alike.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agentrl.errors import AgentRLWarning
from agentrl.learn.policy_model import checkpoint_run_dir
from agentrl.rollout.context import ContextConfig, ContextPolicy, context_policy
from agentrl.rundir import RunDir
from agentrl.tokens import SamplingSpec, read_sampling_spec
from agentrl.train.config import TrainConfig
from agentrl.train.run_config import load_run_config

__all__ = ["RunSampling", "read_run_sampling", "run_sampling"]


@dataclass(frozen=True)
class RunSampling:
    """What decides a run's evaluation episodes, beyond the model's weights."""

    #: The spec the run samples with in training (stop ids, ``max_len``, ``max_new_tokens``,
    #: ``rollout.temperature``, ``top_p``): the trainer's, or the one it recorded (``sampling.json``);
    #: None for a run that recorded none.
    recorded: SamplingSpec | None
    #: ``eval.temperature`` as the run set it (None: evaluation samples at the rollout's temperature).
    eval_temperature: float | None
    #: ``rollout.context``: how the episode's context is rewritten when it grows.
    context: ContextConfig
    #: ``RolloutConfig.env_config()``: the suite, ``rollout.env`` and ``max_turns`` it ran in.
    env_config: dict[str, Any]
    #: ``load_run_config``'s notes (keys an older agentrl wrote that are no longer settings).
    notes: tuple[str, ...] = ()

    @property
    def spec(self) -> SamplingSpec | None:
        """The spec evaluation samples with: the recorded one at ``eval.temperature`` when set."""
        if self.recorded is None or self.eval_temperature is None:
            return self.recorded
        return replace(self.recorded, temperature=self.eval_temperature)

    def context_policy(self) -> ContextPolicy:
        return context_policy(self.context)

    def params(self) -> dict[str, Any]:
        """A JSON mapping of what decides the episodes, for ``agentrl rollout``'s resume check (an
        ``--out`` sampled otherwise is not resumed)."""
        return {
            "spec": None if self.recorded is None else self.recorded.to_json(),
            "eval_temperature": self.eval_temperature,
            "context": self.context.model_dump(mode="json"),
        }


def run_sampling(cfg: TrainConfig, spec: SamplingSpec | None, notes: tuple[str, ...] = ()) -> RunSampling:
    """How a run with config ``cfg`` and sampling spec ``spec`` samples its evaluation episodes."""
    return RunSampling(
        recorded=spec,
        eval_temperature=cfg.eval.temperature,
        context=cfg.rollout.context,
        env_config=cfg.rollout.env_config(),
        notes=tuple(notes),
    )


def read_run_sampling(path: str | Path) -> RunSampling | None:
    """``run_sampling`` of the ``agentrl train`` run that ``path`` is (or whose ``checkpoints/`` or
    checkpoint it is), read from its directory; None when ``path`` is not one (a transformers
    directory, or nothing). ``ConfigError`` when its config or its ``sampling.json`` does not read;
    each of ``load_run_config``'s notes is an ``AgentRLWarning`` too (the CLI prints it as a note)."""
    run = checkpoint_run_dir(path)
    if run is None:
        return None
    rundir = RunDir(run)
    cfg, notes = load_run_config(rundir)
    for note in notes:
        warnings.warn(note, AgentRLWarning, stacklevel=2)
    return run_sampling(cfg, read_sampling_spec(rundir.sampling_file), tuple(notes))
