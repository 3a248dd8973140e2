"""The public MCP reference servers the tests run, and the loopback pieces around them.

``server-everything`` comes from npm through ``.ci/mcp_servers.py`` (cached by its pinned
version); ``mcp-server-fetch`` and ``mcp-server-git`` are dev extras. Nothing here skips: a
missing install fails with the command that makes it.
"""

from __future__ import annotations

import http.server
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mcp_helpers import ECHO, PY, free_port

from tests.luna_process import REPO

INSTALL = f"{sys.executable} {REPO / '.ci' / 'mcp_servers.py'}"


def everything_command() -> str:
    """The installed ``mcp-server-everything`` launcher."""
    out = subprocess.run(
        [sys.executable, str(REPO / ".ci" / "mcp_servers.py"), "--print"],
        capture_output=True,
        text=True,
        check=True,
    )
    launcher = Path(out.stdout.strip()) / "node_modules" / ".bin" / "mcp-server-everything"
    if not launcher.exists():
        raise AssertionError(f"server-everything is not installed; run: {INSTALL}")
    return str(launcher)


class HttpServer:
    """A streamable-HTTP MCP server subprocess on a fixed loopback port: start, kill, again."""

    def __init__(self, kind: str) -> None:
        self.kind = kind  # "echo" (the Python SDK's server) or "everything" (the npm one)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if self.kind == "echo":
            argv, env = [PY, ECHO, "--http", str(self.port)], dict(os.environ)
        else:
            argv, env = (
                [everything_command(), "streamableHttp"],
                {**os.environ, "PORT": str(self.port)},
            )
        self.proc = subprocess.Popen(
            argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.kind} HTTP server exited with {self.proc.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"{self.kind} HTTP server did not listen in 30 s"
                    ) from None
                time.sleep(0.05)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def restart(self) -> None:
        self.kill()
        self.start()


@contextmanager
def http_server(kind: str) -> Iterator[HttpServer]:
    server = HttpServer(kind)
    server.start()
    try:
        yield server
    finally:
        server.kill()


class SlowPage:
    """A loopback web page that takes ``seconds`` to answer and counts its requests."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.requests = 0
        self.asked = threading.Event()
        page = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # the stdlib's name
                if self.path != "/slow":
                    self.send_error(404)
                    return
                page.requests += 1
                page.asked.set()
                time.sleep(page.seconds)
                body = b"<html><body><p>the slow page</p></body></html>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/slow"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.005,), daemon=True)

    def __enter__(self) -> SlowPage:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
