"""``agentrl replay --cache replay``: stored episodes re-run from the recorded tool cache reproduce
their observations and rewards without a single network request; a difference is reported."""

from __future__ import annotations

import json

import yaml

from agentrl.cli import main
from agentrl.env import ResearchEnv
from agentrl.trajectory import read_trajectories, write_trajectories
from tests.replay.helpers import ALPHABET, ROOT, CountingServer


def _http_config(tmp_path, port):
    """Search and fetch over HTTP, both aimed at the counting server."""
    cfg = {
        "search": {"backend": "http", "url": f"http://127.0.0.1:{port}/search"},
        "fetch": {"backend": "http", "allow_addresses": [f"127.0.0.1:{port}"]},
    }
    path = tmp_path / "env.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return cfg, path


def test_stored_and_oracle_reruns_make_no_network_request(recorded, tmp_path, capsys):
    traj, cache = recorded
    with CountingServer() as server:
        cfg, env_yaml = _http_config(tmp_path, server.port)
        # Control: without the replay cache this config does reach the server.
        env = ResearchEnv({**cfg, "suite": str(ALPHABET)})
        env.reset(seed=0, options={"task": "alphabet-2025-cloud"})
        env.step('<tool_call>{"name": "search", "arguments": {"query": "cloud"}}</tool_call>')
        assert server.count == 1
        base = [
            "replay",
            str(traj),
            "--cache",
            "replay",
            "--cache-path",
            str(cache),
            "--config",
            str(env_yaml),
        ]
        out = tmp_path / "rerun.jsonl"
        assert main([*base, "--out", str(out), "--format", "json"]) == 0
        stored_rep = json.loads(capsys.readouterr().out)["rerun"]
        assert main([*base, "--policy", "oracle", "--noise", "0.5"]) == 0
        oracle_table = capsys.readouterr().out
        assert server.count == 1, "a re-run reached the network"
    assert len(stored_rep) == 6
    for r in stored_rep:
        assert r["same_observations"] and r["same_reward"] and r["cache_misses"] == 0, r
        assert r["turns_stored"] == r["turns_rerun"] == 3
    assert "6/6 re-runs identical" in oracle_table  # same seeds: the oracle picks the same sources
    old = {t.id: t for t in read_trajectories(traj)}
    for t in read_trajectories(out):
        assert [m.text for m in t.messages] == [m.text for m in old[t.id].messages]
        assert t.info["seed"] == old[t.id].info["seed"] and t.info["policy"] == "stored"


def test_the_example_file_replays_from_a_fresh_recording(recorded, capsys):
    """examples/trajectories/alphabet-oracle.jsonl is what the oracle does today (same seeds)."""
    _, cache = recorded
    example = ROOT / "examples" / "trajectories" / "alphabet-oracle.jsonl"
    argv = ["replay", str(example), "--cache", "replay", "--cache-path", str(cache), "--suite", str(ALPHABET)]
    assert main(argv) == 0
    assert "6/6 re-runs identical" in capsys.readouterr().out


def test_a_changed_observation_and_an_unrecorded_call_are_reported(recorded, tmp_path, capsys):
    traj, cache = recorded
    trajs = list(read_trajectories(traj))[:2]
    tool = next(m for m in trajs[0].messages if m.role == "tool")
    tool.content = "a page that was never there"
    turn = next(m for m in trajs[1].messages if m.role == "assistant")
    turn.content = '<tool_call>{"name": "search", "arguments": {"query": "never recorded"}}</tool_call>'
    edited = tmp_path / "edited.jsonl"
    write_trajectories(edited, trajs)
    assert main(["replay", str(edited), "--cache", "replay", "--cache-path", str(cache)]) == 0
    out = capsys.readouterr().out
    assert "0/2 re-runs identical" in out
    assert "alphabet-2025-cloud#0: observation 1 differs: stored 'a page that was never there'" in out
    assert "alphabet-2025-cloud#1: observation 1 differs" in out and "not in the replay cache" in out
    row = next(line for line in out.splitlines() if line.startswith("alphabet-2025-cloud#1 "))
    assert row.split()[-1] == "1"  # one cache miss
