"""No surprising success, and errors that point at the user's input rather than at agentrl's insides.

- ``agentrl judge`` exits 1 when nothing was judged: an input with no trajectory, and ``judge
  agreement`` when every sample is a judge error (an unreachable ``--api-base``: it printed a flip
  rate of 0.000, "all equally stable", and exited 0).
- ``--policy bogus`` lists the policy forms, without naming an internal function.
- A hub id (``model.path: Qwen/Qwen3-0.6B``) that is not in the Hugging Face cache fails in one line
  within seconds when the hub cannot be reached (it took 54 s of retries), and at once with
  ``HF_HUB_OFFLINE``; a cached one makes no request. Tested against a closed port and a local server.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
import yaml

from agentrl.errors import ConfigError
from agentrl.hub import HUB_TIMEOUT_S, check_hub_id
from tests.local_http import RecordingServer
from tests.robustness.cli_run import agentrl, build_tiny_suite

ROOT = Path(__file__).resolve().parents[2]
ORACLE = ROOT / "examples" / "trajectories" / "alphabet-oracle.jsonl"
RUBRIC = ROOT / "rubrics" / "alphabet-2025-q1-cloud.yaml"


def _closed_port() -> int:
    """A port of 127.0.0.1 with nothing listening (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_judge_with_no_trajectory_is_an_error(capsys, tmp_path):
    empty = tmp_path / "t.jsonl"
    empty.write_text("")
    rc, err = agentrl(capsys, "judge", empty, "--rubric", RUBRIC, "--no-cache")
    assert rc == 1 and err == [f"agentrl judge: error: {empty}: holds no trajectories: nothing to judge"]
    assert not (tmp_path / "t.judged.jsonl").exists()


def test_agreement_against_an_unreachable_judge_exits_1(capsys):
    base = f"http://127.0.0.1:{_closed_port()}/v1"
    args = ("--model", "openai/m", "--api-base", base, "--max-retries", "0", "--timeout", "2")
    rc, err = agentrl(capsys, "judge", "agreement", ORACLE, "--rubric", RUBRIC, "--samples", "2", *args)
    assert rc == 1, err
    assert err[-1].startswith("agentrl judge agreement: error: all ") and "judge errors" in err[-1], err


def test_an_unknown_policy_lists_the_forms(capsys, tmp_path):
    rc, err = agentrl(capsys, "rollout", "--policy", "bogus", "--out", tmp_path / "o.jsonl", "--limit", "1")
    assert rc == 1 and len(err) == 1, err
    assert err[0] == (
        "agentrl rollout: error: --policy: unknown policy 'bogus'; expected one of oracle, openai:MODEL, "
        "litellm:MODEL, hf:PATH"
    )
    assert not (tmp_path / "o.jsonl").exists()


@pytest.fixture
def empty_hub_cache(tmp_path, monkeypatch) -> Path:
    cache = tmp_path / "hf-cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    return cache


def test_an_uncached_hub_id_fails_at_once_offline(empty_hub_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    t0 = time.perf_counter()
    with pytest.raises(
        ConfigError, match=r"^model\.path 'Qwen/Qwen3-0\.6B': a hub id that is not in the Hugging Face cache"
    ):
        check_hub_id("model.path", "Qwen/Qwen3-0.6B")
    assert time.perf_counter() - t0 < 0.5


@pytest.fixture(scope="module")
def tiny_suite(tmp_path_factory):
    return build_tiny_suite(tmp_path_factory)


def test_an_unreachable_hub_fails_within_its_timeout_through_agentrl_train(
    capsys, empty_hub_cache, monkeypatch, tmp_path, tiny_suite
):
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        yaml.safe_dump({"rollout": {"suite": str(tiny_suite)}, "output_dir": str(tmp_path / "run")})
    )
    t0 = time.perf_counter()
    rc, err = agentrl(capsys, "train", cfg, "--set", "model.path=Qwen/Qwen3-0.6B", "--no-progress")
    assert rc == 1 and len(err) == 1, err
    assert err[0].startswith(
        "agentrl train: error: model.path 'Qwen/Qwen3-0.6B': not in the Hugging Face cache"
    )
    assert "cannot be reached" in err[0] and "HF_ENDPOINT" in err[0]
    assert time.perf_counter() - t0 < HUB_TIMEOUT_S + 5
    assert not (tmp_path / "run").exists()


def test_the_hub_is_asked_once_and_its_answer_decides(empty_hub_cache, monkeypatch):
    known = {"/api/models/org/there": (200, {}, json.dumps({"id": "org/there"}).encode())}
    server = RecordingServer(lambda path: known.get(path, (404, {}, b"{}")))
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    check_hub_id("model.path", "org/there")
    with pytest.raises(ConfigError, match=r"^model\.tokenizer 'org/gone': no such model on the hub"):
        check_hub_id("model.tokenizer", "org/gone", filename="tokenizer_config.json")
    assert [p for p, _ in server.requests] == ["/api/models/org/there", "/api/models/org/gone"]
    # A cached repository makes no request at all, offline or not.
    snap = empty_hub_cache / "models--org--cached" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    check_hub_id("model.path", "org/cached")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    check_hub_id("model.path", "org/cached")
    assert len(server.requests) == 2
    server.httpd.shutdown()
