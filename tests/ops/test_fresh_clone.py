"""The README's first command, run as written in a fresh copy of the repository.

The copy holds exactly the tracked files (what a ``git clone`` of this checkout gets, including
its own ``config.toml`` and ``mcp_servers.json``); nothing here writes a config for Luna. The
install reuses the warm package cache and the cached llama-server build, so it takes seconds.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from luna.agent.notes import EMPTY_REPLY
from tests.luna_process import REPO, clean_env

DEFAULT_PORT = 8001


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def copy_tracked_files(dest: Path) -> Path:
    """The working tree's tracked files, as a fresh clone of this checkout would have them."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.split(b"\0")
    for raw in filter(None, listed):
        rel = raw.decode()
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


@pytest.fixture(scope="module")
def fresh_clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    clone = copy_tracked_files(tmp_path_factory.mktemp("clone") / "luna")
    install = subprocess.run(
        ["bash", ".ci/install"], cwd=clone, env=clean_env(), capture_output=True, text=True,
        timeout=1800,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr[-3000:]
    return clone


def run_luna(clone: Path, text: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = clean_env(**env)
    base.pop("PYTHONPATH", None)  # the clone's own install, not this checkout
    return subprocess.run(
        [".venv/bin/python", "-m", "luna"],
        cwd=clone,
        env=base,
        input=text,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_readme_first_command_answers_through_the_embedded_model(fresh_clone: Path) -> None:
    assert not port_open(DEFAULT_PORT), (
        "something listens on localhost:8001 (a real llama-server?); the README's first "
        "command falls back to the demo model only when nothing answers there"
    )
    proc = run_luna(fresh_clone, "hello, who are you?\n")  # what a new user types first
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "embedded demo model" in proc.stdout
    assert "error:" not in proc.stdout, proc.stdout
    reply = proc.stdout.split("LLM_ENDPOINT=http://HOST:PORT/v1", 1)[1]
    assert reply.strip(), proc.stdout  # the model said something
    assert EMPTY_REPLY not in reply, proc.stdout  # and it was the model, not Luna's notice
    log = (fresh_clone / "data" / "logs" / "embedded-llm.log").read_text(errors="replace")
    assert "llama_server: listening on http://127.0.0.1:" in log  # the C++ server answered
    port = int(log.rsplit("listening on http://127.0.0.1:", 1)[1].split()[0].rstrip("/"))
    assert not port_open(port), "the embedded server outlived Luna"


def test_an_endpoint_the_user_chose_is_never_replaced(fresh_clone: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    by_env = run_luna(fresh_clone, "hello\n", LLM_ENDPOINT=dead)
    assert by_env.returncode == 1, by_env.stderr[-2000:]  # the piped turn failed: a script sees it
    assert "embedded demo model" not in by_env.stdout
    assert f"error: cannot reach the LLM at {dead}" in by_env.stdout
    set_ = subprocess.run(
        [".venv/bin/python", "-m", "luna", "config", "set", "llm.endpoint", dead],
        cwd=fresh_clone, env=clean_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert set_.returncode == 0, set_.stderr
    by_file = run_luna(fresh_clone, "hello\n")
    assert by_file.returncode == 1, by_file.stderr[-2000:]
    assert "embedded demo model" not in by_file.stdout
    assert f"error: cannot reach the LLM at {dead}" in by_file.stdout
    assert "# Set it (here, with" in (fresh_clone / "config.toml").read_text()  # comments kept
