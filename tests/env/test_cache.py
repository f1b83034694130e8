"""Record/replay: replay never touches a backend, and the same seed + cache give identical trajectories."""

from __future__ import annotations

import asyncio

import pytest

from agentrl.env import ResearchEnv
from agentrl.env.backends.cache import ToolCache, cache_key
from agentrl.errors import ConfigError
from agentrl.policy import OraclePolicy
from agentrl.rollout import run_rollout
from agentrl.trajectory import read_trajectories

from .conftest import call


def _strip(t):
    d = t.to_dict()
    d["info"] = {k: v for k, v in d["info"].items() if k not in ("elapsed_s", "tool_log", "suite")}
    d["info"]["tool_log"] = [{k: v for k, v in e.items() if k != "seconds"} for e in t.info["tool_log"]]
    return d


def test_replay_reproduces_a_recorded_rollout(small_suite, tmp_path):
    db = tmp_path / "tools.sqlite"
    rec = {"suite": str(small_suite), "cache": {"mode": "record", "path": str(db)}, "tool_error_rate": 0.2}
    asyncio.run(
        run_rollout(rec, OraclePolicy(noise=0.4), tmp_path / "rec.jsonl", n=2, concurrency=4, limit=6)
    )
    # Replay with the http backends configured at an address nothing listens on: any network
    # request would fail, so identical trajectories prove replay never made one.
    rep = {
        "suite": str(small_suite),
        "cache": {"mode": "replay", "path": str(db)},
        "tool_error_rate": 0.2,
        "search": {"backend": "http", "url": "http://127.0.0.1:9/search"},
        "fetch": {"backend": "http"},
    }
    asyncio.run(
        run_rollout(rep, OraclePolicy(noise=0.4), tmp_path / "rep.jsonl", n=2, concurrency=3, limit=6)
    )
    a = {t.id: _strip(t) for t in read_trajectories(tmp_path / "rec.jsonl")}
    b = {t.id: _strip(t) for t in read_trajectories(tmp_path / "rep.jsonl")}
    assert a.keys() == b.keys() and len(a) == 12
    for k in a:
        assert a[k] == b[k], k


def test_replay_miss_is_an_error_observation(small_suite, tmp_path):
    db = tmp_path / "tools.sqlite"
    env = ResearchEnv({"suite": str(small_suite), "cache": {"mode": "record", "path": str(db)}})
    env.reset(seed=0)
    env.step(call("search", query="recorded  revenue"))
    env = ResearchEnv({"suite": str(small_suite), "cache": {"mode": "replay", "path": str(db)}})
    env.reset(seed=0)
    hit, *_ = env.step(call("search", query="recorded revenue"))  # whitespace is normalised
    assert hit.startswith("Results for")
    miss, *_, info = env.step(call("search", query="never recorded"))
    assert "not in the replay cache" in miss and info["tool_errors"] == 1


def test_failures_are_recorded_too(tmp_path):
    import datetime as dt

    from agentrl.env.backends.base import ToolFailure

    cache = ToolCache(tmp_path / "c.sqlite", "record")
    calls = []

    def boom():
        calls.append(1)
        raise ToolFailure("404 Not Found: x")

    day = dt.date(2024, 1, 1)
    for _ in range(2):
        with pytest.raises(ToolFailure, match="404"):
            cache.call("fetch", {"url": "https://x.example/a/"}, day, boom)
    assert len(calls) == 1 and len(cache) == 1
    assert cache_key("fetch", {"url": "HTTPS://X.example/a"}, day) == cache_key(
        "fetch", {"url": "https://x.example/a/"}, day
    )
    assert cache_key("fetch", {"url": "https://x.example/a"}, dt.date(2024, 1, 2)) != cache_key(
        "fetch", {"url": "https://x.example/a"}, day
    )


def test_replay_without_a_file_is_a_config_error(small_suite, tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        ResearchEnv(
            {"suite": str(small_suite), "cache": {"mode": "replay", "path": str(tmp_path / "none.sqlite")}}
        )
