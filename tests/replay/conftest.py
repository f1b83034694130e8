"""Fixtures of the replay tests: recorded episodes with their tool cache, a tokenizer directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.replay.helpers import record_episodes, save_tokenizer

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


@pytest.fixture(scope="session")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(trajectories, tool cache) of recorded oracle episodes on the Alphabet suite."""
    return record_episodes(tmp_path_factory.mktemp("recorded"))


@pytest.fixture(scope="session")
def tok_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tokenizer(tmp_path_factory.mktemp("tokenizer"))
