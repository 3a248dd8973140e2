"""A tiny OpenAI-compatible embeddings server for tests: real HTTP on 127.0.0.1.

``POST /v1/embeddings`` answers deterministic vectors (a hash of each text seeds them; not unit
length, in reverse order with their ``index``, as a client must cope with). Tests script
statuses, dropped connections and delays first, and assert on :attr:`EmbedServer.requests`.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

DIM = 16


def fake_vector(text: str, dim: int) -> list[float]:
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")
    return (np.random.default_rng(seed).normal(size=dim) * 3).tolist()  # not unit length


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client killed mid-request (kill -9 tests): nothing to report


class EmbedServer:
    """``POST /v1/embeddings`` on 127.0.0.1: scripted statuses first, then vectors."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.script: deque[Any] = deque()  # int status, "drop" (close), ("sleep", s)
        self.dim = DIM
        self.delay = 0.0  # seconds before every answer
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(body)
                server.headers.append(dict(self.headers))
                step = server.script.popleft() if server.script else None
                time.sleep(server.delay)
                if step == "drop":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if isinstance(step, tuple):
                    time.sleep(step[1])
                elif isinstance(step, int):
                    self.send_response(step)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"{}")
                    return
                data = [
                    {"index": i, "object": "embedding", "embedding": fake_vector(t, server.dim)}
                    for i, t in enumerate(body["input"])
                ]
                out = json.dumps({"data": list(reversed(data)), "model": body["model"]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, args=(0.005,), daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
