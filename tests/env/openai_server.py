"""A scripted OpenAI-compatible chat server on 127.0.0.1 (tests and the throughput benchmark).

Turn 1 of an episode searches, turn 2 answers, in Hermes text; every reply carries vLLM-style
``token_ids`` and ``logprobs``. ``latency_s`` delays every reply; ``tito=False`` rejects the vLLM
extensions with HTTP 400, as a plain OpenAI server would.
"""

from __future__ import annotations

import json
import socket
import time
from http.server import BaseHTTPRequestHandler

from tests.local_http import send_json, start_server


class FakeChatServer:
    """Start with ``FakeChatServer()``; ``base`` is the ``/v1`` URL; ``requests`` holds request bodies
    and ``authorization`` their Authorization headers."""

    def __init__(self, latency_s: float = 0.0, tito: bool = True):
        self.requests: list[dict] = []
        self.authorization: list[str | None] = []  # each request's Authorization header
        self.latency_s = latency_s
        self.tito = tito
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def setup(self):
                super().setup()
                # Headers and body go out in two writes; without TCP_NODELAY, Nagle + delayed ACK
                # add ~40 ms to every reply and the benchmark would measure that, not the client.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                server.requests.append(body)
                server.authorization.append(self.headers.get("Authorization"))
                if server.latency_s:
                    time.sleep(server.latency_s)
                if not server.tito and "return_token_ids" in body:
                    send_json(
                        self, 400, {"error": {"message": "Unrecognized request argument: return_token_ids"}}
                    )
                    return
                send_json(self, 200, server.reply(body))

        self.httpd = start_server(Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def reply(self, body: dict) -> dict:
        turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if turns == 0:
            text = '<tool_call>{"name": "search", "arguments": {"query": "quarterly revenue"}}</tool_call>'
        else:
            text = '<tool_call>{"name": "answer", "arguments": {"report": "Revenue was $1.0 billion \\\\cite{x}."}}</tool_call>'
        ids = list(range(100, 100 + 7 + turns))
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        if body.get("logprobs"):
            choice["logprobs"] = {
                "content": [
                    {
                        "token": f"token_id:{i}" if body.get("return_tokens_as_token_ids") else "t",
                        "logprob": -0.1 * (k + 1),
                    }
                    for k, i in enumerate(ids)
                ]
            }
        if body.get("return_token_ids"):
            choice["token_ids"] = ids
        return {"id": "x", "object": "chat.completion", "model": body["model"], "choices": [choice]}

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
