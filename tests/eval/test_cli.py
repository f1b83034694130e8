"""``agentrl eval`` on every policy kind that needs no training run (the oracle, an OpenAI-compatible
server and litellm against a local stand-in; ``hf:`` of a trained run is in test_during_training),
on stored trajectories and run directories, ``eval compare``, and bad input as one readable line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrl.cli import main
from agentrl.env.sandbox import build
from agentrl.eval import scorecard
from agentrl.eval.compare import compare
from agentrl.rundir import RunDir
from agentrl.trajectory import read_trajectories, write_trajectories
from tests.env.openai_server import FakeChatServer


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("eval-cli-suite")
    build(out, seed=7, companies=2, heldout=1)
    return out


def _eval(capsys, *argv: str) -> tuple[int, dict, str]:
    rc = main(["eval", *argv])
    out, err = capsys.readouterr()
    return rc, json.loads(out) if out.strip() else {}, " ".join(err.split())


def test_eval_an_oracle_writes_trajectories_and_prints_a_scorecard(suite, tmp_path, capsys):
    out, js = tmp_path / "o.jsonl", tmp_path / "card.json"
    argv = ["--suite", str(suite), "--split", "heldout", "--policy", "oracle", "--noise", "0.5", "-n", "3",
            "--limit", "4", "--no-progress", "--out", str(out), "--json", str(js)]  # fmt: skip
    rc, card, err = _eval(capsys, *argv)
    assert rc == 0 and card["episodes"] == 12 and card["tasks"] == 4 and card["samples_per_task"] == 3
    assert card["files"] == [str(out)] and json.loads(js.read_text()) == card
    assert card["policies"] == ["oracle(noise=0.5)"] and card["official_share"] is not None
    assert "mean normalised reward [95% CI over tasks]" in err and "12 episodes (0 already done" in err
    trajs = list(read_trajectories(out))
    assert card == {"files": [str(out)], **scorecard(trajs).model_dump(mode="json")}  # the library's numbers
    rc, again, err = _eval(capsys, *argv)  # resumes: nothing re-run, the same scorecard
    assert rc == 0 and again == card and "0 episodes (12 already done" in err


@pytest.mark.parametrize("policy", ["openai:tiny", "litellm:openai/tiny"])
def test_eval_a_served_model(suite, tmp_path, capsys, policy):
    server = FakeChatServer()
    try:
        out = tmp_path / "served.jsonl"
        argv = ["--suite", str(suite), "--split", "heldout", "--policy", policy, "--api-base", server.base,
                "-n", "2", "--limit", "2", "--no-progress", "--out", str(out)]  # fmt: skip
        rc, card, _ = _eval(capsys, *argv)
    finally:
        server.close()
    assert rc == 0 and card["episodes"] == 4 and card["scored"] == 4 and card["tool_call_episodes"] == 1.0
    assert len(server.requests) == 8  # two turns an episode: search, then answer


def _oracle_file(suite: Path, path: Path, noise: float) -> Path:
    argv = ["rollout", "--suite", str(suite), "--split", "heldout", "--policy", "oracle", "--noise",
            str(noise), "-n", "2", "--limit", "6", "--no-progress", "--out", str(path)]  # fmt: skip
    assert main(argv) == 0
    return path


def test_stored_files_run_directories_and_compare(suite, tmp_path, capsys):
    a = _oracle_file(suite, tmp_path / "a.jsonl", 0.8)
    b = _oracle_file(suite, tmp_path / "b.jsonl", 0.0)
    capsys.readouterr()
    rc, card, err = _eval(capsys, str(a))
    assert rc == 0 and card["episodes"] == 12 and str(a) in err
    # a run directory means its latest evaluation
    run = tmp_path / "run"
    write_trajectories(RunDir(run).eval_file(0), read_trajectories(a))
    write_trajectories(RunDir(run).eval_file(3), read_trajectories(b))
    rc, latest, _ = _eval(capsys, str(run))
    assert latest["files"] == [str(RunDir(run).eval_file(3))] and latest["reward"]["mean"] == 1.0
    rc, c, err = _eval(capsys, "compare", str(a), str(run), "--n-boot", "2000", "--stats-seed", "5")
    ref = compare(list(read_trajectories(a)), list(read_trajectories(b)), n_boot=2000, seed=5)
    assert rc == 0 and c["difference"] == ref.difference.model_dump() and c["p_value"] == ref.p_value
    assert c["difference"]["mean"] > 0 and c["pairs"] == 12
    assert "B − A" in err and "paired sign-flip test over tasks" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "give trajectory files to score, `compare A B`, or --policy P --out FILE"),
        (["nope.jsonl"], "nope.jsonl: no such trajectories file or run directory"),
        (["compare", "a.jsonl"], "eval compare takes two inputs"),
        (["--policy", "oracle"], "--policy: give --out FILE.jsonl"),
        (["x.jsonl", "--policy", "oracle"], "give trajectory files or --policy"),
        (["--n-boot", "5"], "argument --n-boot: must be an integer >= 100, got 5"),
    ],
)
def test_bad_input_is_one_line(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    try:
        rc = main(["eval", *argv])
    except SystemExit as e:  # argparse: exit 2
        rc = e.code
    assert rc == (2 if argv[:1] == ["--n-boot"] else 1)
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_directory_without_evaluations_is_refused(tmp_path, capsys):
    rc = main(["eval", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 1 and "a directory with no evaluation" in err
