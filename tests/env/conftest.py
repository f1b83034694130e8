"""Fixtures for the env tests: a private cache dir and a small generated sandbox suite."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ALPHABET = ROOT / "envs" / "alphabet-2025"


@pytest.fixture(scope="session")
def small_suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 3-company sandbox (345 pages, 33 tasks), built once per session."""
    from agentrl.env.sandbox import build

    out = tmp_path_factory.mktemp("sandbox-small")
    build(out, seed=7, companies=3)
    return out


def call(name: str, **args) -> str:
    """A Hermes tool-call turn."""
    import json

    return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"


def judge_and_replay(stored: Path, rubric: Path, tmp_path: Path) -> tuple[dict, dict]:
    """Re-score the stored trajectories ``stored`` (rewards cleared) twice, through the CLIs:
    ``agentrl judge`` with each trajectory's recorded rubric, and ``agentrl replay --rubric
    RUBRIC``, no verdict cache either time; returns each path's rewards by trajectory id."""
    from agentrl.cli import main
    from agentrl.trajectory import read_trajectories

    judged, rescored = tmp_path / "judged.jsonl", tmp_path / "rescored.jsonl"
    assert main(["judge", str(stored), "--out", str(judged), "--no-cache", "--json"]) == 0
    args = ["replay", str(stored), "--rubric", str(rubric), "--no-judge-cache", "--out", str(rescored)]
    assert main([*args, "--format", "json"]) == 0
    by_judge = {t.id: t.reward for t in read_trajectories(judged)}
    by_replay = {t.id: t.reward for t in read_trajectories(rescored)}
    return by_judge, by_replay
