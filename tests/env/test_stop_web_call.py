"""A stop does not wait for a web server that answers late: ``agentrl rollout`` with the ``http``
search backend, stopped while the search call waits on a server that answers after a minute, is
gone within seconds (it took 47.6 s: the episode's thread waited on the tool call without a stop
point, and the interpreter's exit joined the tool pool's thread still blocked in its socket); an
env's inline LLM judge on a late server is left the same way."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler

import pytest

from agentrl.env import ResearchEnv
from agentrl.stopping import RunInterrupted, request_stop, stops_on_signals
from tests.local_http import start_server

from .conftest import ALPHABET, call

SERVER_DELAY_S = 60.0


class _LateServer:
    """A server on 127.0.0.1 that answers no request: each waits until the test ends, then the
    connection closes unanswered (silently: a reply written to a client long gone would print a
    traceback into whichever test is running then)."""

    def __init__(self):
        self.asked, self.release = threading.Event(), threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _serve(self):
                server.asked.set()
                server.release.wait(SERVER_DELAY_S)

            do_GET = do_POST = _serve

        self.httpd = start_server(Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self):
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def late_server():
    server = _LateServer()
    yield server
    server.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_ends_a_rollout_whose_search_waits_on_a_late_server(late_server, small_suite, tmp_path, sig):
    env = tmp_path / "env.yaml"
    env.write_text(
        f'search: {{backend: http, api: retrieve, url: "{late_server.url}", timeout_s: {SERVER_DELAY_S}, retries: 0}}\n'
        f"budgets: {{tool_timeout_s: {SERVER_DELAY_S}}}\n"
    )
    cmd = [sys.executable, "-m", "agentrl", "rollout", "--suite", str(small_suite), "--config", str(env)]
    cmd += ["--policy", "oracle", "-n", "1", "--limit", "1", "--out", str(tmp_path / "out.jsonl")]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ)
    )
    try:
        assert late_server.asked.wait(60), "the rollout never called the search server"
        time.sleep(0.3)  # the call is under way: blocked in its socket
        t0 = time.monotonic()
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        proc.kill()
    assert proc.returncode == (143 if sig == signal.SIGTERM else 130), err
    assert "interrupted" in err
    assert took < 5, f"{took:.1f} s to exit after {sig.name}"


def test_a_stop_does_not_wait_for_an_inline_judge_that_answers_late(late_server):
    cfg = {"suite": str(ALPHABET), "judge": "inline", "judge_model": "judge-model"}
    env = ResearchEnv({**cfg, "judge_api_base": late_server.url})
    env.reset(options={"task": "alphabet-2025-cloud-llm"})
    report = "Cloud revenue $12.3 billion \\cite{alphabet-q1-2025}."
    asked_at = []

    def stop_once_asked():
        late_server.asked.wait(30)
        asked_at.append(time.monotonic())
        request_stop()

    with stops_on_signals(), pytest.raises(RunInterrupted):
        threading.Thread(target=stop_once_asked, daemon=True).start()
        env.step(call("answer", report=report))
    assert asked_at and time.monotonic() - asked_at[0] < 1.0
