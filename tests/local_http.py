"""Small helpers for the stdlib HTTP servers the tests run on 127.0.0.1."""

from __future__ import annotations

import json
import threading
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
