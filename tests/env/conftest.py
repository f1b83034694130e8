"""Fixtures for the env tests: a private cache dir and a small generated sandbox suite."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ALPHABET = ROOT / "envs" / "alphabet-2025"


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory):
    old = os.environ.get("AGENTRL_CACHE")
    os.environ["AGENTRL_CACHE"] = str(tmp_path_factory.mktemp("agentrl-cache"))
    yield
    if old is None:
        os.environ.pop("AGENTRL_CACHE", None)
    else:
        os.environ["AGENTRL_CACHE"] = old


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
