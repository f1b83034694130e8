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
