"""The real ``python -m luna`` REPL against hostile text: control sequences and broken Unicode.

Each test runs the REPL as a subprocess against the scripted LLM server, piped or on a real
pseudo-terminal, and checks the bytes that reach the terminal and the rows that reach the
database.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.luna_process import data_env

# What a hostile reply carries: clear screen + home, set the window title, write the
# clipboard (OSC 52), an 8-bit CSI, a DCS, a bell, a carriage return that would redraw the
# line, a backspace and DEL.
ATTACK = (
    "A\x1b[2J\x1b[HB\x1b]0;pwned-title\x07C\x1b]52;c;cHduZWQ=\x07D\u009b31m"
    "E\x1bP1$r\x1b\\F\rG\x08H\x7fI"
)
SGR = re.compile(rb"\x1b\[[0-9;]*m")


def repl_env(tmp_path: Path, endpoint: str, **extra: str) -> dict[str, str]:
    (tmp_path / "mcp_servers.json").write_text('{"servers": {}}')
    env = data_env(tmp_path, endpoint, **extra)
    env.pop("NO_COLOR", None)
    env.update(extra)
    return env


def run_piped(
    tmp_path: Path, endpoint: str, stdin: bytes, **extra: str
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "luna"],
        cwd=tmp_path,
        env=repl_env(tmp_path, endpoint, **extra),
        input=stdin,
        capture_output=True,
        timeout=120,
        check=False,
    )


def stored(tmp_path: Path) -> list[tuple[str, str]]:
    """(role, content) of every logged message, read straight from the database."""
    with sqlite3.connect(tmp_path / "data" / "luna.db") as conn:
        return list(conn.execute("SELECT role, content FROM messages ORDER BY id"))


def assert_no_controls(out: bytes) -> None:
    """No byte a terminal would obey: C0 but newline and tab, DEL, C1 (UTF-8 C2 80..9F)."""
    for byte in (*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F):
        assert bytes([byte]) not in out, f"control byte {byte:#04x} reached the terminal"
    assert not re.search(rb"\xc2[\x80-\x9f]", out), "a C1 control reached the terminal"


def test_repl_shows_control_sequences_instead_of_obeying_them(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    llm_server.script(
        Reply(content=ATTACK),
        Reply(  # a tool line: the name and the arguments come from the model too
            tool_calls=[{"name": "no_such\x1b]0;t\x07tool", "arguments": '{"x": "\x1b[2J\x07"}'}]
        ),
        Reply(content="after the tool\x1b[5m."),
        Reply(status=401, error_body={"error": {"message": "bad key\x1b]52;c;eA==\x07"}}),
    )
    proc = run_piped(tmp_path, llm_server.url, b"first\nsecond\nthird\n")
    assert proc.returncode == 1, proc.stderr.decode()  # the 401 turn failed: piped, exit 1
    assert_no_controls(proc.stdout)
    out = proc.stdout.decode()
    assert "A␛[2J␛[HB␛]0;pwned-title␇C␛]52;c;cHduZWQ=␇D\\x9b31mE␛P1$r␛\\F␍G␈H␡I" in out
    assert "[tool] no_such␛]0;t␇tool" in out and '{"x": "␛[2J␇"}' in out
    assert "after the tool␛[5m." in out
    error = next(line for line in out.splitlines() if line.startswith("error:"))
    assert "bad key␛]52;c;eA==␇" in error
    assert b"Traceback" not in proc.stderr
    assert_no_controls(proc.stderr)  # the log lines on the console are shown safely too


# Unicode's Bidi_Control characters: embeddings, overrides, isolates and marks. Any of them
# in model text reorders what the terminal shows ("Trojan Source", CVE-2021-42574).
BIDI_CONTROLS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


def test_repl_shows_bidirectional_controls_instead_of_obeying_them(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    llm_server.script(
        Reply(content="open invoice\u202eexe.pdf\u202c now " + BIDI_CONTROLS),
        Reply(status=401, error_body={"error": {"message": "key \u2067reversed\u2069"}}),
    )
    proc = run_piped(tmp_path, llm_server.url, b"first\nsecond\n")
    assert proc.returncode == 1, proc.stderr.decode()  # the 401 turn failed: piped, exit 1
    out, err = proc.stdout.decode(), proc.stderr.decode()
    for ch in BIDI_CONTROLS:
        assert ch not in out and ch not in err, f"U+{ord(ch):04X} reached the terminal"
    assert "open invoice\\u202eexe.pdf\\u202c now" in out
    assert "key \\u2067reversed\\u2069" in out
    # What is stored is what the model said: the neutralizing is for the screen only.
    assert stored(tmp_path)[1] == (
        "assistant",
        "open invoice\u202eexe.pdf\u202c now " + BIDI_CONTROLS,
    )


def _pty_repl(tmp_path: Path, endpoint: str, lines: list[str], **extra: str) -> bytes:
    """Run the REPL on a pseudo-terminal, type ``lines`` one per prompt; all it wrote."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "luna"],
        cwd=tmp_path,
        env=repl_env(tmp_path, endpoint, TERM="dumb", **extra),
        stdin=slave,
        stdout=slave,
        stderr=subprocess.PIPE,
        close_fds=True,
    )
    os.close(slave)
    out = b""
    pending = [*lines, "/quit"]
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
            if pending and out.rstrip().endswith(b"you>"):
                os.write(master, (pending.pop(0) + "\n").encode())
                out += b"\n"  # the next prompt is a new one
            if proc.poll() is not None and not ready:
                break
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    assert proc.returncode == 0, proc.stderr.read().decode() if proc.stderr else ""
    return out


def test_repl_on_a_terminal_keeps_its_own_colours_only(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    llm_server.script(
        Reply(content=ATTACK),
        Reply(tool_calls=[{"name": "no_such_tool", "arguments": "{}"}]),
        Reply(content="done"),
    )
    out = _pty_repl(tmp_path, llm_server.url, ["first", "second"])
    assert "A␛[2J␛[HB␛]0;pwned-title␇C␛]52;c;cHduZWQ=␇D".encode() in out
    assert b"\x1b[36m  [tool] no_such_tool {}\x1b[0m" in out  # Luna's tool line, cyan
    assert b"\x1b[31m  [tool] no_such_tool error" in out  # the failed call, red
    # The only escape sequences on the terminal are Luna's colours.
    assert b"\x1b" not in SGR.sub(b"", out), out
    assert_no_controls(SGR.sub(b"", out).replace(b"\r", b""))  # the tty turns \n into \r\n


def test_repl_honours_no_color(tmp_path: Path, llm_server: FakeLLMServer) -> None:
    llm_server.script(
        Reply(tool_calls=[{"name": "no_such_tool", "arguments": "{}"}]), Reply(content="done")
    )
    out = _pty_repl(tmp_path, llm_server.url, ["first"], NO_COLOR="1")
    assert b"[tool] no_such_tool error" in out and b"done" in out
    assert b"\x1b" not in out


@pytest.mark.parametrize(
    "io_encoding",
    ["", "utf-8"],  # the locale's default (surrogateescape) and strict UTF-8 both ways
)
def test_repl_piped_invalid_utf8_nul_and_a_lone_surrogate_lose_nothing(
    tmp_path: Path, llm_server: FakeLLMServer, io_encoding: str
) -> None:
    llm_server.script(
        Reply(content="one"), Reply(content="lone \ud800 surrogate"), Reply(content="three")
    )
    stdin = b"hello \xff\xfe bad\nsecond \x00 nul\nthird line\n"
    proc = run_piped(tmp_path, llm_server.url, stdin, PYTHONIOENCODING=io_encoding)
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "could not record" not in err, err
    out = proc.stdout.decode()
    assert "lone \ufffd surrogate" in out and "three" in out
    users = [c.split("\n")[0] for role, c in stored(tmp_path) if role == "user"]
    assert users == ["hello \ufffd\ufffd bad", "second \x00 nul", "third line"]
    replies = [c for role, c in stored(tmp_path) if role == "assistant"]
    assert replies == ["one", "lone \ufffd surrogate", "three"]
    sent = [r["messages"][-1]["content"] for r in llm_server.requests]
    assert [s.split("\n")[0] for s in sent] == users
    assert json.dumps(llm_server.requests)  # every request was valid JSON text
