"""The report says when a run had no learning signal, and shows the criterion texts of the rubric
that actually scored the trajectories (a ``judge.rubric`` override included)."""

import json

import pytest

from agentrl.explain.report import write_report
from agentrl.explain.report.metrics import no_signal_steps
from agentrl.trajectory import read_trajectories, write_trajectories
from tests.report.conftest import RUBRIC
from tests.report.helpers import Page

TEXTS = ("Writes at least three vowels.", "Writes a digit.", "Writes two capitals in a row.")


def _edit_metrics(run, **by_step):
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    for r in rows:
        r.update(by_step.get(f"s{int(r['step'])}", {}))
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _edit_trajectories(run, edit):
    for f in sorted((run / "trajectories").glob("step_*.jsonl")):
        trajs = list(read_trajectories(f))
        for t in trajs:
            edit(t)
        f.unlink()
        write_trajectories(f, trajs)


def _criteria_texts(html):
    section = html[html.index('<section id="criteria">') : html.index('<section id="judge">')]
    return {c for c in TEXTS if c in section}


ZERO = {"critic/advantages/max": 0.0, "critic/advantages/min": 0.0, "critic/advantages/mean": 0.0}


def test_no_signal_steps_reads_skips_and_all_zero_advantages():
    rows = [
        {"step": 1, "critic/advantages/max": 0.5, "critic/advantages/min": -0.5, "train/skipped_update": 0.0},
        {"step": 2, **ZERO, "train/skipped_update": 0.0},
        {"step": 3, "train/skipped_update": 1.0},  # no advantages logged: the update never ran
        {"step": 4, "critic/advantages/max": 0.0, "critic/advantages/min": -0.1},
    ]
    assert no_signal_steps(rows) == {2: "every advantage 0", 3: "update skipped"}


def test_a_run_without_learning_signal_says_so(run_copy, tmp_path):
    _edit_metrics(run_copy, s1=ZERO, s2={**ZERO, "train/skipped_update": 1.0})
    html = write_report(run_copy, tmp_path / "r.html").read_text()
    notice = next(a for t, a in Page(html).tags if a.get("id") == "no-signal")
    assert notice["class"] == "warn"
    assert "No learning signal in this run:</b> in all 2 steps, every advantage 0 and update skipped" in html
    assert html.index('id="no-signal"') < html.index('id="curves"')  # above the flat curves


def test_some_steps_without_signal_are_listed(run_copy, tmp_path):
    _edit_metrics(run_copy, s2=ZERO)
    html = write_report(run_copy, tmp_path / "r.html").read_text()
    assert "<b>1 of 2 steps had no learning signal</b> (every advantage 0: steps 2)" in html


def test_a_step_moved_by_the_kl_loss_is_not_called_unchanged(run_copy, tmp_path):
    """Every advantage 0 but a non-zero gradient (``kl_loss_coef`` > 0): the reward taught nothing,
    yet the update moved the policy, and the notice must not say otherwise."""
    _edit_metrics(run_copy, s1={**ZERO, "actor/grad_norm": 0.0}, s2={**ZERO, "actor/grad_norm": 0.02})
    html = write_report(run_copy, tmp_path / "r.html").read_text()
    assert "No learning signal in this run:</b> in all 2 steps" in html
    assert "no update changed the policy" not in html
    assert "in 1 of those steps the gradient was not zero" in html
    _edit_metrics(run_copy, s2={**ZERO, "actor/grad_norm": 0.0})  # now truly unchanged
    html = write_report(run_copy, tmp_path / "r.html").read_text()
    assert "no update changed the policy" in html and "gradient was not zero" not in html


def test_an_unanswered_episode_is_not_a_judge_error(run_copy, tmp_path):
    """An episode that ended without a report scores 0 with why (``status`` ok); only a judge that
    failed (``status`` judge_error) is labelled a judge error."""
    from agentrl.trajectory.models import RewardBreakdown
    from agentrl.trajectory.outcome import unanswered_reward

    def edit(t):
        if t.id.endswith("#0"):
            t.reward = unanswered_reward("generation_limit")
        else:
            t.reward = RewardBreakdown(total=None, status="judge_error", error="the judge timed out")

    _edit_trajectories(run_copy, edit)
    html = write_report(run_copy, tmp_path / "r.html").read_text()
    assert "Judge error: no final answer" not in html
    assert "Scored 0: no final answer (generation_limit)" in html
    assert "Judge error: the judge timed out" in html


def test_criterion_texts_come_from_the_rubric_recorded_by_the_judge(real_run, tmp_path):
    html = write_report(real_run, tmp_path / "r.html").read_text()
    assert _criteria_texts(html) == set(TEXTS)


@pytest.mark.parametrize(
    "recorded",
    [
        None,  # a run written before the judge recorded its rubric
        {"id": "task-rubric", "criteria": [{"id": "vowels", "text": "The task's own text.", "weight": 1}]},
    ],
)
def test_criterion_texts_under_a_judge_rubric_override(run_copy, tmp_path, recorded):
    """``config.json`` names the override that scored every trajectory; a recorded rubric that is
    not the one the reward names (the task's) does not hide its texts."""
    assert json.loads((run_copy / "config.json").read_text())["judge"]["rubric"]

    def edit(t):
        t.info.pop("rubric", None)
        if recorded is not None:
            t.info["rubric"] = recorded

    _edit_trajectories(run_copy, edit)
    html = write_report(run_copy, tmp_path / "r.html").read_text()
    assert _criteria_texts(html) == set(TEXTS)
    assert "The task's own text." not in html
    browser = html[html.index('<section id="trajectories">') :]
    assert "<div class='crit-text'>Writes a digit.</div>" in browser  # each verdict shows its text


def test_criterion_texts_of_a_rubric_named_by_path(run_copy, tmp_path):
    rubric = tmp_path / "named.yaml"
    rubric.write_text(RUBRIC.replace("Writes a digit.", "Writes a numeral."))
    cfg = json.loads((run_copy / "config.json").read_text())
    cfg["judge"]["rubric"] = None
    (run_copy / "config.json").write_text(json.dumps(cfg))
    _edit_trajectories(run_copy, lambda t: t.info.update(rubric=str(rubric)))
    html = write_report(run_copy, tmp_path / "r.html").read_text()
    assert "Writes a numeral." in html and _criteria_texts(html) == {TEXTS[0], TEXTS[2]}
