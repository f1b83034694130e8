"""The suite's session cache directory (tests/conftest.py) is removed when the session that made it
ends, and only then: a nested session that inherited it leaves it for its parent."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import conftest


@pytest.fixture
def fresh_env(monkeypatch):
    """No session cache in the environment (as for a top-level pytest run); restored afterwards."""
    for k in ("AGENTRL_TEST_CACHE", "AGENTRL_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "/home/someone/.cache")  # a user's own value comes back


def _config() -> SimpleNamespace:
    return SimpleNamespace(stash=pytest.Stash())


def test_the_session_that_made_the_cache_removes_it(fresh_env):
    outer = _config()
    conftest.pytest_configure(outer)
    base = Path(os.environ["AGENTRL_TEST_CACHE"])
    assert base.is_dir() and base.name.startswith("agentrl-test-cache-")
    assert os.environ["AGENTRL_CACHE"] == str(base / "agentrl")
    (base / "agentrl" / "sandbox").mkdir(parents=True)
    (base / "agentrl" / "sandbox" / "index.bin").write_bytes(b"x")

    inner = _config()  # a pytest run inside a test inherits the directory
    conftest.pytest_configure(inner)
    assert os.environ["AGENTRL_TEST_CACHE"] == str(base)
    conftest.pytest_unconfigure(inner)
    assert base.is_dir() and os.environ["AGENTRL_TEST_CACHE"] == str(base)

    conftest.pytest_unconfigure(outer)
    assert not base.exists()
    assert "AGENTRL_TEST_CACHE" not in os.environ and "AGENTRL_CACHE" not in os.environ
    assert os.environ["XDG_CACHE_HOME"] == "/home/someone/.cache"
    conftest.pytest_unconfigure(outer)  # a second call finds nothing to do
