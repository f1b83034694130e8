"""The audit judge's parts: agreement (flip rate, kappa) against hand values, least-squares slopes
against numpy, the divergence rule on its boundaries, the deterministic part of a rubric, and an
auditor that scores copies with another rubric and never touches the training rewards."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agentrl.errors import ConfigError
from agentrl.eval.audit import Auditor, agreement, deterministic_part, divergence, ols_slope
from agentrl.eval.config import AuditConfig
from agentrl.judge import parse_rubric
from agentrl.trajectory import Message
from tests.eval.fixtures import traj

HERE = Path(__file__).parent


def test_agreement_hand_values():
    # pass/fail at 0.5: train P P F F, audit P F F P → 2 of 4 differ; p_o 0.5, p_e 0.5 → κ 0
    a = agreement([1.0, 0.9, 0.1, 0.0], [1.0, 0.0, 0.2, 0.7], 0.5)
    assert a.episodes == 4 and a.flip_rate == pytest.approx(0.5) and a.kappa == pytest.approx(0.0)
    assert a.train_mean == pytest.approx(0.5) and a.audit_mean == pytest.approx(0.475)
    # train P P P F, audit P P F F: p_o 3/4, p_e (3·2 + 1·2)/16 = 1/2 → κ 0.5
    b = agreement([1, 1, 1, 0], [1, 1, 0, 0], 0.5)
    assert b.flip_rate == pytest.approx(0.25) and b.kappa == pytest.approx(0.5)
    assert agreement([1, 1], [1, 1], 0.5).kappa is None  # one category throughout: undefined


def test_ols_slope_matches_numpy():
    x, y = [1, 2, 4, 7], [0.1, 0.5, 0.4, 0.9]
    assert ols_slope(x, y) == pytest.approx(np.polyfit(x, y, 1)[0])


def test_divergence_fires_only_when_training_rises_and_audit_falls_enough():
    rising_falling = [(1, 0.2, 0.6), (2, 0.4, 0.5), (3, 0.6, 0.4)]
    d = divergence(rising_falling, window=3, min_gap=0.1)
    assert d is not None and d.fires and d.train_slope == pytest.approx(0.2)
    assert d.audit_slope == pytest.approx(-0.1) and d.widened == pytest.approx(0.6)
    assert divergence(rising_falling[:2], window=3, min_gap=0.1) is None  # too few points
    both_rise = [(1, 0.2, 0.2), (2, 0.4, 0.3), (3, 0.6, 0.4)]
    assert not divergence(both_rise, window=3, min_gap=0.1).fires
    flat_audit = [(1, 0.2, 0.3), (2, 0.4, 0.3), (3, 0.6, 0.3)]
    assert not divergence(flat_audit, window=3, min_gap=0.1).fires
    small = [(1, 0.50, 0.50), (2, 0.51, 0.49), (3, 0.52, 0.48)]  # the gap widens by 0.04 only
    assert not divergence(small, window=3, min_gap=0.1).fires
    assert divergence(small, window=3, min_gap=0.04).fires
    # only the last `window` points count: an old fall and rise is forgotten
    old = [(1, 0.0, 0.9), (2, 0.5, 0.5), *both_rise_shift(3)]
    assert not divergence(old, window=3, min_gap=0.1).fires


def both_rise_shift(start):
    return [(start, 0.5, 0.5), (start + 1, 0.6, 0.6), (start + 2, 0.7, 0.7)]


def _mixed_rubric():
    return parse_rubric(
        {
            "id": "mixed",
            "aggregation": "normalized",
            "criteria": [
                {"id": "judged", "text": "Reads well.", "weight": 1.0},
                {"id": "digit", "text": "A figure.", "weight": 1.0, "grader": {"type": "regex", "pattern": "[0-9]"},
                 "requires": ["judged"]},
                {"id": "cite", "text": "Cites.", "weight": 1.0, "grader": {"type": "contains", "text": "cite"}},
            ],
        }
    )  # fmt: skip


def test_deterministic_part_drops_llm_criteria_and_requirements_on_them():
    part = deterministic_part(_mixed_rubric())
    assert [c.id for c in part.criteria] == ["digit", "cite"]
    assert part.criteria[0].requires == [] and part.is_deterministic
    only_llm = parse_rubric({"id": "llm", "criteria": [{"id": "x", "text": "x", "weight": 1.0}]})
    with pytest.raises(ConfigError, match="only LLM criteria"):
        deterministic_part(only_llm)


def _answered(task, sample, report, reward):
    t = traj(task, sample, reward)
    t.messages.append(Message(role="assistant", content=report))
    t.info["report"] = report
    return t


def test_auditor_scores_copies_with_its_rubric():
    trajs = [_answered("a", 0, "Q1 2024", 0.0), _answered("a", 1, "summary", 1.0), traj("b", 0, None)]
    auditor = Auditor(AuditConfig(rubric=str(HERE / "figure_rubric.yaml"), pass_threshold=0.5))
    found = auditor.audit(trajs)
    assert [t.id for t in found.trajectories] == ["a#0", "a#1"]  # unjudged episodes are not audited
    assert [t.info["audit_reward"]["total"] for t in found.trajectories] == [1.0, 0.0]
    assert [t.reward.total for t in trajs[:2]] == [0.0, 1.0] and "audit_reward" not in trajs[0].info
    a = found.agreement
    assert (
        a.train_mean == 0.5 and a.audit_mean == 0.5 and a.flip_rate == 1.0 and a.kappa == pytest.approx(-1.0)
    )
    assert auditor.add_point("train", 1, a) is None  # fewer points than the window
    auditor.close()


def test_auditor_refuses_llm_criteria_without_a_model():
    auditor = Auditor(AuditConfig(), task_rubric=lambda t: _mixed_rubric())
    with pytest.raises(ConfigError, match=r"set eval\.audit\.judge\.model"):
        auditor.audit([_answered("a", 0, "x", 1.0)])
    det = Auditor(AuditConfig(graders="deterministic"), task_rubric=lambda t: _mixed_rubric())
    (copy,) = det.audit([_answered("a", 0, "cite 7", 1.0)]).trajectories
    assert copy.info["audit_reward"]["normalized"] == 1.0  # digit (its requirement dropped) and cite
