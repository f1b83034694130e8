"""Evaluation: scorecards with intervals over tasks, paired comparisons, evaluation during training,
and the audit judge (docs/eval.md).

Layer: above ``rollout`` and ``learn``, below ``train`` (the trainer calls the evaluation hook;
this package never imports the trainer). numpy is its only numeric dependency.
"""

from agentrl.eval.scorecard import CriterionRate, Interval, Scorecard, scorecard, scorecard_table
from agentrl.eval.stats import bootstrap_ci, pass_at_k, sign_flip_pvalue, task_means

__all__ = [
    "CriterionRate",
    "Interval",
    "Scorecard",
    "bootstrap_ci",
    "pass_at_k",
    "scorecard",
    "scorecard_table",
    "sign_flip_pvalue",
    "task_means",
]
