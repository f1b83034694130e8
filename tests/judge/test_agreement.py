"""``agentrl judge agreement``: flip rates, the most stable mapping, accuracy and Cohen's kappa.

The fake judge's ``flaky-4`` scenario moves the first criterion's verdict to Partially Satisfied
on every 4th call about the same report, so with 4 samples each trajectory has exactly one noisy
sample and every figure below is known by hand.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentrl.cli
from agentrl.errors import ConfigError
from agentrl.judge import JudgeConfig, parse_rubric
from agentrl.judge.agreement import cohen_kappa, flip_rate, measure_agreement, read_labels
from agentrl.trajectory import write_trajectories
from tests.judge.conftest import make_trajectory

RUBRIC = """\
id: agree
criteria:
  - id: accuracy
    text: Gives the figure `12.3 billion`.
    weight: 1.0
  - id: temporal
    text: Says the report is `not published yet`.
    weight: 1.0
  - id: citation
    text: Cites a source.
    weight: 0.5
    grader: {type: regex, pattern: '\\\\cite\\{[^}]+\\}'}
"""
GOOD1 = "Q1 2025 cloud revenue was $12.3 billion; the full-year report is not published yet \\cite{q1}."
GOOD2 = "Google Cloud made $12.3 billion in Q1 2025 \\cite{release}."
GOSSIP = "Alphabet made $5 trillion in 2025 \\cite{gossip}."

# Labels: accuracy good1 F, good2 P, gossip N; temporal good1 F, gossip F.
LABELS = [
    ("good1", "accuracy", "Fully Satisfied"),
    ("good2", "accuracy", "Partially Satisfied"),
    ("gossip", "accuracy", "Not Satisfied"),
    ("good1", "temporal", "Fully Satisfied"),
    ("gossip", "temporal", "Fully Satisfied"),
    ("nobody", "accuracy", "Fully Satisfied"),  # no such trajectory: unmatched
]


def reference_kappa(pairs):
    """Cohen's kappa from the confusion matrix, written out the long way."""
    cats = sorted({x for p in pairs for x in p}, key=str)
    n = len(pairs)
    table = {(a, b): 0 for a in cats for b in cats}
    for a, b in pairs:
        table[(a, b)] += 1
    p_o = sum(table[(c, c)] for c in cats) / n
    p_e = 0.0
    for c in cats:
        row = sum(table[(c, b)] for b in cats) / n
        col = sum(table[(a, c)] for a in cats) / n
        p_e += row * col
    return (p_o - p_e) / (1 - p_e)


def test_cohen_kappa_hand_computed():
    # 2x2: 20 yes/yes, 5 yes/no, 10 no/yes, 15 no/no: p_o = 0.7, p_e = 0.5*0.6 + 0.5*0.4 = 0.5 -> 0.4.
    pairs = [("y", "y")] * 20 + [("y", "n")] * 5 + [("n", "y")] * 10 + [("n", "n")] * 15
    assert cohen_kappa(pairs) == pytest.approx(0.4)
    assert cohen_kappa([("a", "a"), ("b", "b")]) == pytest.approx(1.0)
    # Agreement exactly at chance: p_o = p_e = 0.5.
    assert cohen_kappa([("y", "y"), ("y", "n"), ("n", "y"), ("n", "n")]) == pytest.approx(0.0)
    assert cohen_kappa([("y", "n"), ("n", "y")]) == pytest.approx(-1.0)
    assert cohen_kappa([("y", "y"), ("y", "y")]) is None  # one category throughout: undefined
    assert cohen_kappa([]) is None


def test_cohen_kappa_matches_reference_on_random_ratings():
    rng = random.Random(7)
    for _ in range(50):
        pairs = [(rng.choice("FPN"), rng.choice("FPN")) for _ in range(rng.randint(3, 40))]
        if len({*(a for a, _ in pairs), *(b for _, b in pairs)}) < 2:
            continue
        assert cohen_kappa(pairs) == pytest.approx(reference_kappa(pairs))


def test_flip_rate_hand_computed():
    assert flip_rate([["F", "F", "F", "P"]]) == pytest.approx(3 / 6)
    assert flip_rate([["F", "F", "P", "P"], ["N", "N"]]) == pytest.approx((4 / 6 + 0) / 2)
    assert flip_rate([["F"], []]) is None  # no item with two samples


@pytest.fixture
def run_files(tmp_path) -> tuple[Path, Path, Path]:
    trajs = tmp_path / "run.jsonl"
    write_trajectories(
        trajs,
        [
            make_trajectory(GOOD1, tid="good1"),
            make_trajectory(GOOD2, tid="good2"),
            make_trajectory(GOSSIP, tid="gossip"),
            make_trajectory("", tid="silent", info={"status": "unanswered"}),
        ],
    )
    rubric = tmp_path / "agree.yaml"
    rubric.write_text(RUBRIC)
    labels = tmp_path / "labels.jsonl"
    lines = [json.dumps({"trajectory_id": t, "criterion_id": c, "verdict": v}) for t, c, v in LABELS]
    labels.write_text("# labelled by hand\n" + "\n".join(lines) + "\n")
    return trajs, rubric, labels


def check_report(r) -> None:
    by = {c.id: c for c in r.criteria}
    assert r.trajectories == 4 and r.unanswered == 1 and r.judge_errors == 0 and r.samples == 4
    acc, tmp, cit = by["accuracy"], by["temporal"], by["citation"]
    assert (acc.verdicts, acc.unstable, tmp.unstable, cit.unstable) == (12, 3, 0, 0)
    # accuracy: good1 and good2 F,F,F,P; gossip N,N,N,P. Pairs that differ (of 6 per trajectory):
    # ternary 3, 3, 3; strict (P scores 0) 3, 3, 0; binary (P scores 1) 0, 0, 3.
    flips = {m: acc.mappings[m].flip_rate for m in ("strict", "ternary", "binary")}
    assert flips == pytest.approx({"strict": 1 / 3, "ternary": 1 / 2, "binary": 1 / 6})
    assert tmp.mappings["ternary"].flip_rate == 0.0 and cit.mappings["ternary"].flip_rate == 0.0
    # Pooled over the LLM criteria (accuracy and temporal, 3 trajectories each).
    assert r.flip_rate == pytest.approx({"strict": 1 / 6, "ternary": 1 / 4, "binary": 1 / 12})
    assert r.most_stable == ["binary"]
    # Labels: 12 accuracy samples. Verdicts: 3 + 1 + 3 agree = 7/12; judge F6 P3 N3, labels F4 P4 N4:
    # p_e = (24 + 12 + 12) / 144 = 1/3, kappa = (7/12 - 1/3) / (2/3) = 3/8.
    assert acc.labelled == 12 and r.labels == 6 and r.labels_unmatched == 1
    assert acc.mappings["ternary"].accuracy == pytest.approx(7 / 12)
    assert acc.mappings["ternary"].kappa == pytest.approx(3 / 8)
    # strict: labels 1,0,0; agree 3 + 1 + 4 = 8/12; judge 1s 6, labels 1s 4: p_e = 1/2, kappa 1/3.
    assert acc.mappings["strict"].accuracy == pytest.approx(8 / 12)
    assert acc.mappings["strict"].kappa == pytest.approx(1 / 3)
    # binary: labels 1,1,0; agree 4 + 4 + 3 = 11/12; judge 1s 9, labels 1s 8: p_e = 7/12, kappa 4/5.
    assert acc.mappings["binary"].accuracy == pytest.approx(11 / 12)
    assert acc.mappings["binary"].kappa == pytest.approx(4 / 5)
    # temporal: the fake judge says F for good1 (label F) and N for gossip (label F): 4 of 8 agree;
    # the labels use one category only, the judge two: p_e = 1/2 * 1 -> kappa 0.
    assert tmp.labelled == 8 and tmp.mappings["ternary"].accuracy == pytest.approx(0.5)
    assert tmp.mappings["ternary"].kappa == pytest.approx(0.0)
    assert by["citation"].labelled == 0 and by["citation"].mappings["strict"].kappa is None


def test_measure_agreement_against_a_flaky_judge(judge_server, run_files, tmp_path):
    trajs, rubric_path, labels_path = run_files
    from agentrl.trajectory import read_trajectories

    # A configured verdict cache is bypassed: every sample is a call.
    cache = str(tmp_path / "cache.sqlite")
    # samples=3 (majority vote) is the scoring setting; agreement makes one call per sample.
    config = JudgeConfig(
        model="flaky-4:api", api_base=judge_server.url, max_retries=0, cache_path=cache, samples=3
    )
    before = judge_server.counts["flaky-4:api"]
    report = measure_agreement(
        list(read_trajectories(trajs)),
        parse_rubric(rubric_path.read_text()),
        config,
        samples=4,
        labels=read_labels(labels_path),
    )
    check_report(report)
    assert judge_server.counts["flaky-4:api"] - before == 12  # 3 answered x 4 samples, no cache
    assert not Path(cache).exists()  # neither read nor written: noisy samples stay out of it


@pytest.fixture
def cli(monkeypatch):
    monkeypatch.setattr(agentrl.cli, "COMMANDS", ("judge",))
    return agentrl.cli.main


def test_cli_agreement_and_plain_judge_both_work(cli, capsys, judge_server, run_files, tmp_path):
    trajs, rubric, labels = run_files
    common = ["--rubric", str(rubric), "--api-base", judge_server.url, "--max-retries", "0"]
    argv = [
        "judge",
        "agreement",
        str(trajs),
        "--samples",
        "4",
        "--labels",
        str(labels),
        "--model",
        "flaky-4:cli",
    ]
    assert cli([*argv, *common, "--json"]) == 0
    from agentrl.judge.agreement import AgreementReport

    check_report(AgreementReport.model_validate_json(capsys.readouterr().out))
    assert cli([*argv[:-1], "flaky-4:cli2", *common]) == 0
    text = capsys.readouterr().out
    assert "most stable mapping: binary" in text and "accuracy" in text and "0.375" in text
    # The plain form still scores and writes, with --samples meaning majority vote there.
    out = tmp_path / "judged.jsonl"
    plain = ["judge", str(trajs), "--model", "good:agree", "--out", str(out), "--no-cache", *common]
    assert cli(plain) == 0
    assert "wrote 4 trajectories" in capsys.readouterr().out and out.is_file()


def test_cli_agreement_errors(cli, capsys, run_files, tmp_path):
    trajs, rubric, _ = run_files
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"trajectory_id": "a", "criterion_id": "b", "verdict": "Mostly Satisfied"}\n')
    assert cli(["judge", "agreement", str(trajs), "--labels", str(bad), "--rubric", str(rubric)]) == 1
    assert f"{bad}:1: verdict: " in capsys.readouterr().err
    dup = tmp_path / "dup.jsonl"
    line = '{"trajectory_id": "a", "criterion_id": "b", "verdict": "Not Satisfied"}\n'
    dup.write_text(line + "\n" + line)
    with pytest.raises(ConfigError, match=r"dup.jsonl:3: a second label"):
        read_labels(dup)
    with pytest.raises(SystemExit) as e:  # refused by the parser, before any work: exit 2, one line
        cli(["judge", "agreement", str(trajs), "--samples", "1", "--rubric", str(rubric)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1
    assert "argument --samples: must be an integer >= 2, got 1" in err


def test_flaky_scenario_is_exact(judge_server):
    # The scenario itself: 8 calls about one report, 2 noisy ones, whatever the order.
    from agentrl.judge import make_judge
    from agentrl.judge.llm import run_sync

    rubric = parse_rubric(RUBRIC)
    t = make_trajectory(GOOD1)
    with make_judge(JudgeConfig(model="flaky-4:exact", api_base=judge_server.url)) as judge:
        rewards = run_sync(judge.score_many([(t, rubric)] * 8, dedup=False))
    assert Counter(r.criteria[0].verdict for r in rewards) == {"Fully Satisfied": 6, "Partially Satisfied": 2}


def test_example_labels_name_example_trajectories():
    from agentrl.trajectory import read_trajectories

    root = Path(__file__).resolve().parents[2] / "examples" / "trajectories"
    labels = read_labels(root / "alphabet-oracle.labels.jsonl")
    ids = {t.id for t in read_trajectories(root / "alphabet-oracle.jsonl")}
    assert len(labels) == 6 and {tid for tid, _ in labels} <= ids


def test_judge_errors_are_counted_and_their_criteria_left_out(judge_server, run_files):
    from agentrl.trajectory import read_trajectories

    trajs, rubric_path, _ = run_files
    config = JudgeConfig(
        model="garbage-always:agree", api_base=judge_server.url, max_retries=0, max_parse_retries=0
    )
    r = measure_agreement(
        list(read_trajectories(trajs)), parse_rubric(rubric_path.read_text()), config, samples=2
    )
    assert r.judge_errors == 6 and [c.id for c in r.criteria] == ["citation"]
    assert r.flip_rate == {"strict": 0.0, "ternary": 0.0, "binary": 0.0} and r.most_stable == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from("abc")), min_size=1, max_size=97))
def test_cohen_kappa_never_leaves_its_range_and_full_agreement_is_exactly_one(pairs):
    k = cohen_kappa(pairs)
    if k is not None:
        assert -1.0 <= k <= 1.0
        assert k == pytest.approx(reference_kappa(pairs), abs=1e-12)
    same = [(a, a) for a, _ in pairs]
    assert cohen_kappa(same) in (None, 1.0)  # exactly 1.0, not 0.9999999999999998
