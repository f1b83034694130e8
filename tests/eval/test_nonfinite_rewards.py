"""Issue 35 row 3: a reward that is not finite, or outside its rubric's range, is an error where it is
read (one rule, in ``RewardBreakdown``), never a number in a statistic; and what agentrl writes is
strict JSON (``agentrl.jsonl.dumps``)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from agentrl.cli import main
from agentrl.errors import ConfigError, TrajectoryFormatError
from agentrl.eval.compare import compare
from agentrl.jsonl import dumps, finite_or_null
from agentrl.replay import load_trajectories
from agentrl.rundir import RunDir, write_json
from agentrl.trajectory import CriterionScore, RewardBreakdown, read_trajectories, write_trajectories
from tests.eval.fixtures import traj

NAN, INF = math.nan, math.inf
# criteria a (weight 1), b (weight 1), neg-x (weight −1): a weighted sum lies on [−1, 2].
CRITERIA = {"a": 1.0, "b": 0.0, "neg-x": 0.0}


def _strict(text: str) -> Any:
    """JSON as any strict reader takes it: NaN, Infinity and -Infinity are not JSON."""

    def refuse(name: str) -> Any:
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def _good(tmp_path: Path) -> Path:
    """Six scored episodes over three tasks, two samples each, rewards that vary."""
    path = tmp_path / "A.jsonl"
    rewards = [0.2, 0.4, 0.5, 0.9, 0.1, 0.6]
    write_trajectories(path, [traj(f"t{i // 2}", i % 2, r, criteria=CRITERIA) for i, r in enumerate(rewards)])
    return path


def _edited(src: Path, dst: Path, edit: Callable[[dict[str, Any]], None], line: int = 3) -> Path:
    """``src`` with ``edit`` applied to the reward of its ``line``-th line, written as Python's json
    writes it (``NaN``, ``Infinity``: what a hand edit or another tool leaves)."""
    rows = [json.loads(x) for x in src.read_text().splitlines()]
    edit(rows[line - 1]["reward"])
    dst.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return dst


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(reward: dict[str, Any]) -> None:
        reward[key] = value

    return edit


def _set_score(value: float) -> Callable[[dict[str, Any]], None]:
    def edit(reward: dict[str, Any]) -> None:
        reward["criteria"][0]["score"] = value

    return edit


# (edit, the field named, words of the message)
BAD = {
    "normalized NaN": (_set("normalized", NAN), "reward.normalized", "finite number (got nan)"),
    "normalized inf": (_set("normalized", INF), "reward.normalized", "finite number (got inf)"),
    "normalized 5": (_set("normalized", 5.0), "reward.normalized", "less than or equal to 1 (got 5.0)"),
    "normalized -0.5": (_set("normalized", -0.5), "reward.normalized", "greater than or equal to 0"),
    "total NaN": (_set("total", NAN), "reward.total", "finite number (got nan)"),
    "total -inf": (_set("total", -INF), "reward.total", "finite number (got -inf)"),
    "total outside its criteria": (_set("total", 7.0), "reward", "total 7 is outside [-1, 2]"),
    "normalized true": (_set("normalized", True), "reward.normalized", "a reward is a number, not true"),
    "score NaN": (_set_score(NAN), "reward.criteria.0.score", "finite number"),
    "score 2": (_set_score(2.0), "reward.criteria.0.score", "less than or equal to 1"),
}


@pytest.fixture
def good(tmp_path: Path) -> Path:
    return _good(tmp_path)


@pytest.mark.parametrize("case", list(BAD))
def test_every_reader_refuses_the_same_bad_reward_naming_file_line_and_field(good, tmp_path, case):
    """The store (eval, eval compare, report, the trainer's files) and replay's reader give the same
    error: ``FILE:3: FIELD: ...``."""
    edit, field, words = BAD[case]
    bad = _edited(good, tmp_path / "B.jsonl", edit)
    want = f"{bad}:3: {field}: "
    for read in (lambda p: list(read_trajectories(p)), lambda p: load_trajectories(p)[0]):
        with pytest.raises(TrajectoryFormatError) as e:
            read(bad)
        assert str(e.value).startswith(want) and words in str(e.value), str(e.value)


@pytest.mark.parametrize("case", ["normalized NaN", "total -inf", "normalized 5"])
def test_eval_and_eval_compare_refuse_with_one_line_and_print_no_statistic(good, tmp_path, capsys, case):
    """The issue's repro: ``agentrl eval compare A A_with_nans`` printed ``B − A +nan … p-value 5e-05``."""
    edit, field, _ = BAD[case]
    bad = _edited(good, tmp_path / "A_with_nans.jsonl", edit)
    for argv in (["eval", str(bad)], ["eval", "compare", str(good), str(bad)]):
        assert main(argv) == 1
        out, err = capsys.readouterr()
        assert out == "" and "p-value" not in err and "B − A" not in err
        assert err.startswith(f"agentrl eval: error: {bad}:3: {field}: ") and err.count("\n") == 1, err


def test_the_same_rule_holds_for_rewards_built_in_memory():
    """The judge, the env and the trainer's batch build ``RewardBreakdown`` objects: the rule is the
    model's, so none of them can hold a NaN or an out-of-range reward either."""
    crits = [CriterionScore(id="a", score=1.0, weight=1.0), CriterionScore(id="x", score=0.0, weight=-1.0)]
    for kwargs in (
        {"total": NAN},
        {"total": INF},
        {"total": 0.5, "normalized": NAN},
        {"total": 0.5, "normalized": 1.5},
        {"total": 1.5, "criteria": crits},  # the criteria allow [−1, 1]
        {"total": -1.5, "criteria": crits},
        {"total": 1.5, "aggregation": "normalized"},
    ):
        with pytest.raises(ValidationError):
            RewardBreakdown(**kwargs)
    with pytest.raises(ValidationError):
        CriterionScore(id="a", score=NAN, weight=1.0)
    # The bounds themselves are rewards a rubric can give, and a total with no criteria is unbounded.
    assert RewardBreakdown(total=1.0, criteria=crits).total == 1.0
    assert RewardBreakdown(total=-1.0, criteria=crits, normalized=0.0).normalized == 0.0
    assert RewardBreakdown(total=2.5).total == 2.5


def test_a_total_with_nothing_to_normalise_it_is_no_normalised_reward(good, tmp_path, capsys):
    """``normalized`` absent and no criteria: the total is not on [0, 1], so it cannot enter a mean of
    normalised rewards (it gave mean 2.068 in the issue's ``normalized: 5.0`` variant)."""

    def drop(reward: dict[str, Any]) -> None:
        reward.update(total=5.0, normalized=None, criteria=[])

    bad = _edited(good, tmp_path / "C.jsonl", drop)
    assert main(["eval", str(bad)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "trajectory 't1#0': reward.total 5 has no normalised value on [0, 1]" in err


def test_compare_never_returns_a_statistic_of_a_nan_difference():
    """A reward that skipped validation (``model_construct``) still cannot reach a p-value."""
    a = [traj(f"t{i}", 0, 0.5) for i in range(4)]
    b = [traj(f"t{i}", 0, 0.7) for i in range(4)]
    assert b[2].reward is not None
    b[2].reward = RewardBreakdown.model_construct(**{**b[2].reward.__dict__, "normalized": NAN})
    with pytest.raises(ConfigError, match="not a finite number"):
        compare(a, b, n_boot=200)


def test_dumps_is_strict_json_and_names_the_field():
    assert _strict(dumps({"a": [1.0, {"b": 2}]})) == {"a": [1.0, {"b": 2}]}
    for value, where in (({"a": [1.0, {"b": NAN}]}, "a[1].b"), ([INF], "[0]"), (-INF, "<root>")):
        with pytest.raises(ValueError, match="^" + re.escape(f"{where}: a number that is not finite")):
            dumps(value)
    assert finite_or_null({"x": INF, "y": [1.0, NAN], "z": "nan"}) == {
        "x": None,
        "y": [1.0, None],
        "z": "nan",
    }


def test_run_files_are_strict_json(tmp_path):
    """``summary.json`` and ``metrics.jsonl`` write an undefined metric (a gradient norm that
    overflowed) as null; any other JSON agentrl writes refuses a non-finite number, naming it."""
    run = RunDir(tmp_path)
    run.append_metrics({"step": 1, "actor/grad_norm": INF, "actor/pg_loss": 0.5})
    run.rewrite_metrics([{"step": 1, "actor/grad_norm": NAN}, {"step": 2, "actor/grad_norm": 1.0}])
    run.append_metrics({"step": 3, "actor/grad_norm": -INF})
    rows = [_strict(x) for x in run.metrics_file.read_text().splitlines()]
    assert rows == [{"step": 1, "actor/grad_norm": None}, {"step": 2, "actor/grad_norm": 1.0},
                    {"step": 3, "actor/grad_norm": None}]  # fmt: skip
    run.append_sft({"sft/step": 1, "sft/loss": NAN})
    assert _strict(run.sft_file.read_text()) == {"sft/step": 1, "sft/loss": None}
    run.write_summary({"steps": 1, "final": {"actor/grad_norm": INF}})
    assert _strict(run.summary_file.read_text())["final"] == {"actor/grad_norm": None}
    with pytest.raises(ValueError, match=r"^difference\.mean: "):
        write_json(tmp_path / "x.json", {"difference": {"mean": NAN}})


def test_eval_json_outputs_are_strict_json(good, tmp_path, capsys):
    js = tmp_path / "card.json"
    assert main(["eval", str(good), "--json", str(js), "--n-boot", "200"]) == 0
    out = capsys.readouterr().out
    assert _strict(out) == _strict(js.read_text())
    assert main(["eval", "compare", str(good), str(good), "--json", str(js), "--n-boot", "200"]) == 0
    assert _strict(capsys.readouterr().out)["difference"]["mean"] == 0.0
