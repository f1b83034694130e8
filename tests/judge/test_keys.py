"""Keys the judge sends (issue #17): $OPENAI_API_KEY only to OpenAI's own API, never retried when refused."""

from __future__ import annotations

import json

import pytest

import agentrl.cli
from agentrl.judge import JudgeConfig
from agentrl.trajectory import read_trajectories, write_trajectories
from tests.judge.conftest import GOOD_REPORT, make_trajectory
from tests.judge.test_llm import RUBRIC, model, requests_for, score
from tests.local_http import RecordingServer

# REAL is in the environment as $OPENAI_API_KEY for every test of this module.
from tests.openai_key import REAL, real_openai_key_in_env  # noqa: F401


def test_base_url_from_the_environment_gets_no_real_key(judge_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", judge_server.url)  # litellm sends openai/ models there
    cfg = JudgeConfig(model="openai/" + model("good"), backoff_base_s=0.01, timeout_s=5.0)
    assert score(cfg).total == 2.5
    sent = [r for r in judge_server.requests if "openai/" + r["model"] == cfg.model]
    assert [r["_authorization"] for r in sent] == ["Bearer sk-local"]


def test_a_redirect_to_another_host_carries_no_key(judge_server):
    hop = RecordingServer(lambda path: (307, {"Location": judge_server.url.removesuffix("/v1") + path}, b""))
    try:
        cfg = JudgeConfig(model=model("good"), api_base=hop.url + "/v1", api_key="sk-explicit", timeout_s=5.0)
        assert score(cfg).total == 2.5
        assert hop.header("authorization") == ["Bearer sk-explicit"]
        assert [r["_authorization"] for r in requests_for(judge_server, cfg)] == [None]
    finally:
        hop.close()


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_key_is_not_retried(status):
    body = json.dumps({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}})
    s = RecordingServer(lambda path: (status, {"Content-Type": "application/json"}, body.encode()))
    try:
        cfg = JudgeConfig(
            model="m", api_base=s.url + "/v1", max_retries=3, backoff_base_s=0.01, timeout_s=5.0
        )
        reward = score(cfg, rubric=RUBRIC)
        assert reward.status == "judge_error" and reward.total is None
        assert len(s.requests) == 1
    finally:
        s.close()


def test_cli_api_key_env(judge_server, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(agentrl.cli, "COMMANDS", ("judge",))
    monkeypatch.setenv("MY_JUDGE_KEY", "sk-judge-server")
    src, out = tmp_path / "t.jsonl", tmp_path / "o.jsonl"
    write_trajectories(src, [make_trajectory(GOOD_REPORT)])
    rubric = tmp_path / "r.yaml"
    rubric.write_text(json.dumps(RUBRIC.model_dump(mode="json")))
    argv = [
        "judge",
        str(src),
        "--rubric",
        str(rubric),
        "--model",
        model("good"),
        "--api-base",
        judge_server.url,
    ]
    argv += ["--no-cache", "--out", str(out)]
    assert agentrl.cli.main([*argv, "--api-key-env", "MY_JUDGE_KEY"]) == 0
    assert next(read_trajectories(out)).reward.total == 2.5
    name = argv[argv.index("--model") + 1]
    assert [r["_authorization"] for r in judge_server.requests if r["model"] == name] == [
        "Bearer sk-judge-server"
    ]
    assert agentrl.cli.main([*argv, "--api-key-env", "UNSET_JUDGE_KEY"]) == 1
    assert "UNSET_JUDGE_KEY is not set" in capsys.readouterr().err
