"""A scheduled result in the real interactive REPL (a pseudo-terminal): printed above the line
being typed, which is drawn again and still sent whole when Enter is pressed."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.scheduler.test_scheduler_process import cli, env, wait_for


class Terminal:
    """``python -m luna repl`` on a pseudo-terminal; ``screen`` is every byte it wrote."""

    def __init__(
        self, tmp_path: Path, endpoint: str, environ: dict[str, str] | None = None
    ) -> None:
        master, slave = os.openpty()
        self.master = master
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "luna", "repl", "--no-embedded"],
            cwd=tmp_path,
            env={**(environ or env(tmp_path, endpoint)), "TERM": "xterm"},
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
        )
        os.close(slave)
        self.screen = b""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 4096)
            except OSError:
                return
            if not data:
                return
            self.screen += data

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def close(self) -> int:
        """Ctrl-D on an empty line; a REPL that does not exit is killed (exit code -9)."""
        self.type(b"\x15\x04")  # Ctrl-U clears the line, Ctrl-D ends the REPL
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=30)
        finally:
            self._reader.join(timeout=10)
            os.close(self.master)


def test_repl_scheduled_result_is_printed_above_the_line_being_typed(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    cli(tmp_path, llm_server.url, "add", "stretch your legs", "--after", "1h")
    llm_server.script(Reply(content="Noted, half a line it is."))
    term = Terminal(tmp_path, llm_server.url)
    try:
        wait_for(lambda: b"you> " in term.screen, "the prompt")
        term.type(b"half a li")
        wait_for(lambda: term.screen.endswith(b"half a li"), "the typed text echoed")
        cli(tmp_path, llm_server.url, "run-now", "1")  # the REPL's Luna fires it within 1 s
        wait_for(lambda: "⏰ Reminder: stretch your legs".encode() in term.screen, "the reminder")
        after = term.screen.split("⏰ Reminder: stretch your legs".encode(), 1)
        wait_for(lambda: term.screen.endswith(b"you> half a li"), "the line drawn again")
        assert after[0].endswith(b"\r\x1b[2K")  # printed on a cleared line, not inside it
        term.type(b"ne\r")
        wait_for(lambda: b"Noted, half a line it is." in term.screen, "the answer")
        try:  # then Ctrl-D
            wait_for(lambda: term.screen.endswith(b"you> "), "the next prompt")
        except AssertionError as e:
            raise AssertionError(f"{e}; the screen ends {term.screen[-400:]!r}") from None
        (request,) = llm_server.requests
        user = [m for m in request["messages"] if m["role"] == "user"][-1]["content"]
        assert user.startswith("half a line\n\n<context>")  # the line was sent whole
    finally:
        code = term.close()
    assert code == 0, term.screen.decode(errors="replace")[-2000:]
    assert b"Traceback" not in term.screen
