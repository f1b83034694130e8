"""Fixtures for the Ray tests: one real 2-CPU local Ray per session, a private cache, a small suite.

Ray takes seconds to start, so every test of this directory shares one instance. Tests are marked
``ray`` and skip (at module level) where Ray is not installed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ALPHABET = ROOT / "envs" / "alphabet-2025"
TIMINGS = {"elapsed_s", "seconds"}


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory):
    """A local Ray with 2 CPUs, started through ``ensure_ray`` (workers see the private cache)."""
    import ray

    from agentrl.rollout.ray_cluster import ensure_ray

    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "AGENTRL_CACHE")}
    os.environ["RAY_AUTH_MODE"] = "disabled"  # never pick up a token from ~/.ray
    os.environ["AGENTRL_CACHE"] = str(tmp_path_factory.mktemp("agentrl-cache"))
    assert ensure_ray(num_cpus=2)
    yield ray
    ray.shutdown()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def small_suite(ray_cluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-company sandbox (230 pages, 22 tasks)."""
    from agentrl.env.sandbox import build

    out = tmp_path_factory.mktemp("sandbox-small")
    build(out, seed=7, companies=2)
    return out


def canon(traj, drop: frozenset[str] = frozenset()) -> dict:
    """A trajectory as JSON without wall-clock timings (and without the keys in ``drop``)."""

    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in TIMINGS and k not in drop}
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x

    return strip(traj.model_dump(mode="json"))


def by_id(path: Path, drop: frozenset[str] = frozenset()) -> dict[str, dict]:
    """The trajectories of a JSONL file by id, as ``canon`` gives them."""
    from agentrl.trajectory import read_trajectories

    return {t.id: canon(t, drop) for t in read_trajectories(path)}
