"""Small helpers for the stdlib HTTP servers the tests run on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def start_server(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    """Serve ``handler`` on a free port of 127.0.0.1 from a daemon thread; ``.server_address[1]`` is
    the port, ``.shutdown()`` stops it."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    return httpd


def send_json(handler: BaseHTTPRequestHandler, status: int, obj: Any) -> None:
    """Answer the request being handled with ``obj`` as a JSON body."""
    data = json.dumps(obj).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


Reply = tuple[int, dict[str, str], bytes]


class RecordingServer:
    """A server on 127.0.0.1 answering every GET and POST with ``reply(path)`` -> (status, headers,
    body) and recording each request's path and headers (lower-case names) in ``requests``."""

    def __init__(self, reply: Callable[[str], Reply]):
        self.requests: list[tuple[str, dict[str, str]]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _serve(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                server.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                status, headers, body = reply(self.path)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _serve

        self.httpd = start_server(Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def header(self, name: str) -> list[str | None]:
        """The value of header ``name`` in each request received, in order (None where absent)."""
        return [h.get(name.lower()) for _, h in self.requests]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
