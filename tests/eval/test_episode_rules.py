"""Issue 35 rows 5 and 11: ``agentrl eval`` refuses a (task, sample) held twice, by the rule ``eval
compare`` applies (``agentrl.eval.episodes.one_per_episode``); ``eval compare`` warns when the two
sides were rolled out on different suites."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from agentrl.cli import main
from agentrl.errors import AgentRLWarning, ConfigError
from agentrl.eval import scorecard
from agentrl.eval.compare import compare
from agentrl.eval.episodes import one_per_episode
from agentrl.trajectory import write_trajectories
from tests.eval.fixtures import traj

# Rewards chosen so that pooling a file with itself changes pass@k (1 of 2 samples of t0 passes).
NOISY = [("t0", 0, 1.0), ("t0", 1, 0.0), ("t1", 0, 1.0), ("t1", 1, 1.0), ("t2", 0, 0.0), ("t2", 1, 0.5)]


def _file(path: Path, rows=NOISY, **info) -> Path:
    write_trajectories(path, [traj(t, s, r, **info) for t, s, r in rows])
    return path


def _eval(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["eval", *argv, "--n-boot", "200"])
    out, err = capsys.readouterr()
    return rc, out, err


def test_eval_refuses_a_file_concatenated_with_itself(tmp_path, capsys):
    """The issue's repro: ``cat noisy.jsonl noisy.jsonl > dup.jsonl; agentrl eval dup.jsonl`` reported
    twice the samples per task and another pass@2."""
    noisy = _file(tmp_path / "noisy.jsonl")
    dup = tmp_path / "dup.jsonl"
    dup.write_bytes(noisy.read_bytes() * 2)
    rc, out, err = _eval(capsys, str(dup))
    assert rc == 1 and out == ""
    assert err == (
        f"agentrl eval: error: {dup}: task 't0' sample 0 appears twice ('t0#0' and 't0#0'); score one "
        "episode per (task, sample): a file concatenated with itself, or two policies' files pooled, "
        "counts some episodes twice\n"
    )
    rc, out, _ = _eval(capsys, str(noisy))
    assert rc == 0 and json.loads(out)["samples_per_task"] == 2


def test_eval_refuses_two_files_that_hold_the_same_episode_and_pools_disjoint_ones(tmp_path, capsys):
    a = _file(tmp_path / "a.jsonl")
    b = _file(tmp_path / "b.jsonl", [("t1", 1, 0.2), ("t3", 0, 0.4)], policy="other")
    rc, out, err = _eval(capsys, str(a), str(b))
    assert rc == 1 and out == "" and err.startswith(f"agentrl eval: error: {a} and {b}: task 't1' sample 1 ")
    rc, _, err = _eval(capsys, str(a), str(a))  # one file given twice is two sources too
    assert rc == 1 and f"{a} and {a}: task 't0' sample 0 appears twice" in err
    c = _file(tmp_path / "c.jsonl", [("t3", 0, 0.4), ("t3", 1, 0.6)])
    rc, out, _ = _eval(capsys, str(a), str(c))
    assert rc == 0 and json.loads(out)["episodes"] == 8


def test_eval_and_compare_apply_the_one_rule_alike(tmp_path, capsys):
    """The same file is refused by both commands with the same words; an unscored duplicate counts
    (it would be counted twice among the episodes)."""
    rows = [*NOISY, ("t2", 1, None)]
    dup = _file(tmp_path / "dup.jsonl", rows)
    want = f"{dup}: task 't2' sample 1 appears twice ('t2#1' and 't2#1')"
    dup_trajs = [traj(t, s, r) for t, s, r in rows]
    with pytest.raises(ConfigError) as e:
        one_per_episode([(str(dup), dup_trajs)])
    assert str(e.value).startswith(want)
    with pytest.raises(ConfigError) as e:  # the library's compare, not only the CLI's reading
        compare([traj(t, s, r) for t, s, r in NOISY], dup_trajs, b_name=str(dup), n_boot=200)
    assert str(e.value).startswith(want)
    good = _file(tmp_path / "good.jsonl")
    for argv in ([str(dup)], ["compare", str(good), str(dup)], ["compare", str(dup), str(good)]):
        rc, out, err = _eval(capsys, *argv)
        assert rc == 1 and out == "" and err.startswith(f"agentrl eval: error: {want}"), err


def test_the_scorecard_of_unique_episodes_is_what_pooling_would_have_changed():
    """Why the rule: pooled duplicates move pass@2 (1 − C(2,2)/C(4,2) = 5/6 for t0 doubled, not 1)."""
    once = [traj(t, s, r) for t, s, r in NOISY]
    card = scorecard(once, kinds={}, n_boot=200)
    twice = scorecard(once + once, kinds={}, n_boot=200)
    assert card.pass_at_k["2"] == pytest.approx(2 / 3)  # t0, t1 pass at 2; t2 never
    assert twice.pass_at_k["2"] != pytest.approx(card.pass_at_k["2"])


def test_compare_warns_when_the_two_sides_come_from_different_suites(tmp_path, capsys):
    a = [traj(t, s, r, suite="envs/q4-2024") for t, s, r in NOISY]
    b = [traj(t, s, min(1.0, (r or 0) + 0.1), suite="envs/q1-2025") for t, s, r in NOISY]
    with pytest.warns(AgentRLWarning, match=r"A was rolled out on suite envs/q4-2024 and B on envs/q1-2025"):
        c = compare(a, b, a_name="A", b_name="B", n_boot=200)
    assert (c.a_suites, c.b_suites) == (["envs/q4-2024"], ["envs/q1-2025"]) and c.pairs == 6
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same suite, or one side that names none: no warning
        same = compare(a, [traj(t, s, r, suite="envs/q4-2024") for t, s, r in NOISY], n_boot=200)
        compare(a, [traj(t, s, r) for t, s, r in NOISY], n_boot=200)
    assert same.a_suites == same.b_suites == ["envs/q4-2024"]
    fa, fb = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_trajectories(fa, a)
    write_trajectories(fb, b)
    rc, out, err = _eval(capsys, "compare", str(fa), str(fb))
    assert rc == 0 and json.loads(out)["b_suites"] == ["envs/q1-2025"]
    assert f"note: {fa} was rolled out on suite envs/q4-2024 and {fb} on envs/q1-2025" in err
