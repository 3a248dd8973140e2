"""Progress where a person watches, none where a script reads: the first start's model export
says its steps on a terminal (tmux), and imports and reindexes draw no bars into a pipe."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.frontends.test_repl import wait_for
from tests.luna_process import data_env


def _tmux(socket: str, *args: str) -> str:
    return subprocess.run(
        ["tmux", "-L", socket, *args], capture_output=True, text=True, check=True
    ).stdout


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_first_export_shows_its_steps_and_pipes_get_no_bars(tmp_path: Path) -> None:
    # An empty machine model cache: the model is exported here, not found prepared.
    env = data_env(tmp_path, "http://127.0.0.1:9/v1", LUNA_CACHE_DIR=str(tmp_path / "cache"))
    (tmp_path / "mcp_servers.json").write_text('{"servers": {}}')
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items() if "\n" not in v)
    script = tmp_path / "run.sh"
    script.write_text(
        f"cd {shlex.quote(str(tmp_path))}\n"
        f"env -i {exports} {shlex.quote(sys.executable)} -m luna memory add 'my bike is red'\n"
        "echo exit=$?\nsleep 600\n"
    )
    socket = f"luna-test-{tmp_path.name}"
    _tmux(socket, "new-session", "-d", "-x", "200", "-y", "50", "sh", str(script))
    try:
        screen = lambda: _tmux(socket, "capture-pane", "-p")  # noqa: E731
        wait_for(lambda: "exit=" in screen(), timeout=600)  # the export: a minute or more
        shown = screen()
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)
    assert "exit=0" in shown, shown
    steps = [line for line in shown.splitlines() if "preparing the embedding model" in line]
    assert len(steps) == 4 and steps[0].endswith("s so far)"), shown
    assert "1/4" in steps[0] and "4/4" in steps[-1], shown
    # The model is cached now: an import and a reindex into a pipe are quick, and quiet.
    notes = tmp_path / "notes.jsonl"
    notes.write_text("".join(json.dumps({"text": f"note {i}"}) + "\n" for i in range(20)))
    for argv in (["memory", "import", str(notes)], ["memory", "reindex"]):
        proc = subprocess.run(
            [sys.executable, "-m", "luna", *argv],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        assert "\r" not in proc.stderr and "it/s" not in proc.stderr, proc.stderr
