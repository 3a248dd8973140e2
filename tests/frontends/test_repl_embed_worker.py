"""The REPL and its embedding worker: Ctrl-C in a real terminal (tmux) reaches Luna's process,
never the worker; and a piped session exits promptly although the worker is still loading.

A terminal sends SIGINT to the whole foreground process group, which holds the spawned
embedding worker too; ``proc.send_signal`` in test_repl.py signals only Luna's own process.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.frontends.test_repl import repl_env, start_repl, wait_for

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")


def _tmux(socket: str, *args: str) -> str:
    return subprocess.run(
        ["tmux", "-L", socket, *args], capture_output=True, text=True, check=True
    ).stdout


def _worker_pids(luna_pid: int) -> list[int]:
    """Luna's spawned children (the embedding worker) by their command line."""
    out = subprocess.run(["pgrep", "-P", str(luna_pid)], capture_output=True, text=True).stdout
    pids = []
    for pid in map(int, out.split()):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"spawn_main" in cmdline:
            pids.append(pid)
    return pids


@needs_tmux
def test_repl_ctrl_c_in_a_terminal_leaves_the_embedding_worker_running(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    llm_server.script(Reply(content="slow", delay=60), Reply(content="Fast answer."))
    env = repl_env(tmp_path, llm_server.url)
    err = tmp_path / "stderr.txt"
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items() if "\n" not in v)
    script = tmp_path / "run.sh"
    script.write_text(
        f"cd {shlex.quote(str(tmp_path))}\n"
        f"echo $$ > luna.pid\n"
        f"exec env -i {exports} {shlex.quote(sys.executable)} -m luna 2> {shlex.quote(str(err))}\n"
    )
    socket = f"luna-test-{tmp_path.name}"
    _tmux(socket, "new-session", "-d", "-x", "160", "-y", "50", "sh", str(script))
    try:
        screen = lambda: _tmux(socket, "capture-pane", "-p")  # noqa: E731
        wait_for(lambda: "you>" in screen())
        luna_pid = int((tmp_path / "luna.pid").read_text())
        wait_for(lambda: bool(_worker_pids(luna_pid)))  # memory warms the worker at start
        worker = _worker_pids(luna_pid)[0]
        _tmux(socket, "send-keys", "take your time", "Enter")
        wait_for(lambda: len(llm_server.requests) == 1)
        _tmux(socket, "send-keys", "C-c")  # during a reply
        wait_for(lambda: "[cancelled]" in screen())
        _tmux(socket, "send-keys", "C-c")  # at the idle prompt
        wait_for(lambda: "Ctrl-D or /quit" in screen())
        time.sleep(1.0)  # a worker killed by SIGINT is gone well within this
        assert Path(f"/proc/{worker}").exists(), "the embedding worker died of Ctrl-C"
        _tmux(socket, "send-keys", "quick one", "Enter")
        wait_for(lambda: "Fast answer." in screen())
        _tmux(socket, "send-keys", "/quit", "Enter")
        wait_for(lambda: not Path(f"/proc/{luna_pid}").exists(), timeout=30)
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)
    stderr = err.read_text()
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert "worker process died" not in stderr, stderr


def test_repl_piped_exits_promptly_while_the_worker_still_loads(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    # A fresh data folder: the worker is exporting the model (about 90 s) when the input ends.
    proc = start_repl(tmp_path, llm_server.url)
    start = time.monotonic()
    out, err = proc.communicate("hi\n", timeout=120)
    seconds = time.monotonic() - start
    assert proc.returncode == 0, err
    assert "ok" in out
    assert seconds < 9.0, f"exit took {seconds:.1f} s"  # was 13 s: a 10 s wait for the worker
