"""The ``eval:`` section of a training config: evaluation during training, and the audit judge.

``agentrl.train.config.TrainConfig`` holds an ``EvalConfig``; ``agentrl train --print-config`` shows
every field with its description.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agentrl.judge.config import JudgeConfig

__all__ = ["DEFAULT_SPLIT", "AuditConfig", "EvalConfig"]

#: The split evaluated when ``eval.split`` is not set.
DEFAULT_SPLIT = "heldout"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class AuditConfig(_Strict):
    rubric: str | None = Field(
        None,
        description="rubric YAML the audit judge scores every episode with; null = each task's own rubric "
        "from its suite (whatever judge.rubric trains on)",
    )
    graders: Literal["all", "deterministic"] = Field(
        "all",
        description="deterministic = only the audit rubric's deterministic and evidence graders (its LLM "
        "criteria left out, and requirements on them dropped); all = every criterion",
    )
    judge: JudgeConfig = Field(
        default_factory=JudgeConfig,
        description="the audit's LLM judge (model, api_base, ...; another model than judge.model, say); "
        "model null = the audit rubric must be deterministic (or graders: deterministic)",
    )
    every: int = Field(
        0,
        ge=0,
        description="also audit a sample of every k-th training step's trajectories; 0 = evaluations only",
    )
    sample: int = Field(8, ge=1, description="trajectories audited per audited training step (a seeded draw)")
    pass_threshold: float = Field(
        0.5,
        ge=0,
        le=1,
        description="an episode passes a judge when its normalised reward is at least this: flip rate "
        "and Cohen's kappa compare the two judges' pass/fail",
    )
    window: int = Field(
        5, ge=3, description="audited points (steps) in the divergence check's least-squares fits"
    )
    min_gap: float = Field(
        0.1,
        gt=0,
        description="divergence: the training reward's fitted trend rises, the audit's falls, and the "
        "gap between the fitted lines widens by at least this much over the window",
    )


class EvalConfig(_Strict):
    suite: str | None = Field(None, description="suite to evaluate on; null = the run's rollout.suite")
    split: str | None = Field(
        None,
        description="split of the eval suite (train, heldout, all); null = heldout, which the suite must "
        "have (set the split, or eval.suite, otherwise)",
    )
    n: int = Field(1, ge=1, description="samples per task (mean@n, best@n, pass@k up to k = n)")
    limit: int | None = Field(None, ge=1, description="only the first N tasks of the split")
    every: int = Field(0, ge=0, description="evaluate after every k-th RL step; 0 = never during training")
    temperature: float | None = Field(
        None, gt=0, description="sampling temperature of eval episodes; null = rollout.temperature"
    )
    before_train: bool = Field(
        False,
        description="evaluate before RL step 1 (after the warm start: the policy RL starts from), logged "
        "as step 0",
    )
    at_end: bool = Field(False, description="evaluate after the last RL step")
    seed: int = Field(
        0,
        ge=0,
        description="base seed of eval episodes: the same at every evaluation, so evaluations pair by "
        "(task, sample), and equal to `agentrl rollout --seed` for the same pairs",
    )
    pass_threshold: float = Field(
        1.0,
        ge=0,
        le=1,
        description="pass@k counts a sample as passing at this normalised reward (1 = full score)",
    )
    n_boot: int = Field(10_000, ge=100, description="bootstrap resamples of the intervals")
    audit: AuditConfig | None = Field(
        None, description="a second judge that scores evaluations (and optionally training steps)"
    )

    @property
    def runs(self) -> bool:
        """Whether any evaluation runs."""
        return self.before_train or self.at_end or self.every > 0

    @property
    def split_name(self) -> str:
        return self.split or DEFAULT_SPLIT
