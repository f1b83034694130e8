"""Held-out worlds: a sandbox built with held-out companies, and the task splits every path selects by."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agentrl.env import ResearchEnv
from agentrl.env.sandbox import build
from agentrl.env.suite import load_suite
from agentrl.errors import ConfigError


def _tasks(path):
    return [json.loads(line) for line in (path / "tasks.jsonl").read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def worlds(tmp_path_factory):
    root = tmp_path_factory.mktemp("worlds")
    stats = build(root / "split", seed=5, companies=3, heldout=2)
    build(root / "plain", seed=5, companies=3)
    return root, stats


def test_heldout_companies_leave_the_training_world_unchanged(worlds):
    root, stats = worlds
    assert stats["splits"] == {"train": 33, "heldout": 22}
    split, plain = _tasks(root / "split"), _tasks(root / "plain")
    assert split[:33] == plain  # same tasks, byte for byte: no split key on training tasks
    assert all(t["split"] == "heldout" for t in split[33:])
    corpus = (root / "split" / "corpus.jsonl").read_bytes()
    assert corpus.startswith((root / "plain" / "corpus.jsonl").read_bytes())  # one web: all pages


def test_heldout_companies_share_no_name_or_page_with_training_ones(worlds):
    root, _ = worlds
    tasks = _tasks(root / "split")
    company = {t["id"]: t["id"].split("-")[0] for t in tasks}
    train = {company[t["id"]] for t in tasks[:33]}
    held = {company[t["id"]] for t in tasks[33:]}
    assert len(train) == 3 and len(held) == 2 and not train & held
    for t in tasks[33:]:  # the official page a held-out answer needs names the held-out company
        assert company[t["id"]] in t["ground_truth"]["official"]["url"]


def test_suites_select_tasks_by_split(worlds):
    root, _ = worlds
    suite = load_suite(root / "split")
    assert suite.splits == {"train": 33, "heldout": 22}
    assert [t.id for t in suite.tasks_in("train")] == [t.id for t in suite.tasks[:33]]
    assert [t.id for t in suite.tasks_in("heldout")] == [t.id for t in suite.tasks[33:]]
    assert len(suite.tasks_in("all")) == 55
    with pytest.raises(
        ConfigError, match=r"no tasks in split 'test' \(its splits: train \(33\), heldout \(22\)\)"
    ):
        suite.tasks_in("test")
    plain = load_suite(root / "plain")  # a suite that names no splits: every task trains
    assert len(plain.tasks_in("train")) == 33


def test_the_env_draws_only_from_its_split(worlds):
    root, _ = worlds
    held = {t.id for t in load_suite(root / "split").tasks_in("heldout")}
    train_env = ResearchEnv({"suite": str(root / "split")})
    held_env = ResearchEnv({"suite": str(root / "split"), "split": "heldout"})
    drawn_train = {train_env.reset(seed=s) and train_env.task.id for s in range(60)}
    drawn_held = {held_env.reset(seed=s) and held_env.task.id for s in range(60)}
    assert drawn_train and not drawn_train & held
    assert drawn_held and drawn_held <= held
    train_env.reset(seed=0, options={"task": sorted(held)[0]})  # a task named explicitly: any split
    assert train_env.task.id == sorted(held)[0]


def test_sandbox_yaml_names_heldout_companies(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTRL_CACHE", str(tmp_path / "cache"))
    suite_dir = tmp_path / "suite"
    suite_dir.mkdir()
    (suite_dir / "sandbox.yaml").write_text("seed: 5\ncompanies: 3\nheldout_companies: 2\n")
    assert load_suite(suite_dir).splits == {"train": 33, "heldout": 22}
    (suite_dir / "sandbox.yaml").write_text("seed: 5\ncompanies: 3\nheldout: 2\n")
    with pytest.raises(ConfigError, match="unknown key 'heldout'"):
        load_suite(str(suite_dir) + "/")  # another key: not the cached suite


def test_rollout_cli_runs_a_split(worlds, tmp_path):
    root, _ = worlds
    out = tmp_path / "held.jsonl"
    cmd = [sys.executable, "-m", "agentrl", "rollout", "--suite", str(root / "split"), "--split", "heldout"]
    done = subprocess.run([*cmd, "--out", str(out), "--no-progress"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    held = {t.id for t in load_suite(root / "split").tasks_in("heldout")}
    ran = {json.loads(line)["task_id"] for line in out.read_text().splitlines()}
    assert ran == held
    bad = subprocess.run(
        [*cmd[:-1], "nope", "--out", str(tmp_path / "x.jsonl")], capture_output=True, text=True
    )
    assert bad.returncode != 0 and "no tasks in split 'nope'" in bad.stderr
