"""Shared builders of the replay and explain tests: recorded oracle episodes on the Alphabet suite
(with their tool cache), a tokenizer saved to disk, and a small counting HTTP server."""

from __future__ import annotations

import asyncio
import http.server
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ALPHABET = ROOT / "envs" / "alphabet-2025"


def record_episodes(out: Path) -> tuple[Path, Path]:
    """Oracle episodes (noise 0.5, 2 samples of each of the 3 Alphabet tasks), tool cache recorded.
    With seed 0, ``alphabet-2025-cloud`` gets one good (2.5) and one gossip (0.5) report and the
    task with an LLM rubric stays unscored. Returns (trajectories, tool cache)."""
    from agentrl.policy import OraclePolicy
    from agentrl.rollout import run_rollout

    out.mkdir(parents=True, exist_ok=True)
    traj, cache = out / "traj.jsonl", out / "tools.sqlite"
    cfg = {"suite": str(ALPHABET), "cache": {"mode": "record", "path": str(cache)}}
    asyncio.run(run_rollout(cfg, OraclePolicy(noise=0.5), traj, n=2, concurrency=1, seed=0))
    # File order by task then sample, so tests can name rows.
    from agentrl.trajectory import read_trajectories, write_trajectories

    trajs = sorted(read_trajectories(traj), key=lambda t: t.id)
    write_trajectories(traj, trajs)
    return traj, cache


def save_tokenizer(out: Path) -> Path:
    """The tests' ChatML tokenizer (trained in-process) saved as a local directory."""
    from tests.tokens.fixtures import make_tokenizer_cached

    make_tokenizer_cached("chatml").save_pretrained(out)
    return out


class CountingServer:
    """An HTTP server on 127.0.0.1 that answers every request with an empty JSON result and counts them."""

    def __init__(self) -> None:
        self.count = 0
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                owner.count += 1
                body = b'{"results": []}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> CountingServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
