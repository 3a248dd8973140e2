"""Lines typed at the terminal, read off the event loop: ``LineReader``.

Invariants:
- stdin is read in one daemon thread, started at the first read, so the event loop keeps
  running while a prompt waits, never waits for a thread to start, and a read blocked on the
  terminal never keeps the process alive at shutdown.
- One read is pending at a time; a line typed in answer to another question (an approval that
  timed out) is never handed to the next one.
- On a tty, readline keeps the history (``history_file``).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO


def _settle(
    future: asyncio.Future[str | None], value: str | None, error: BaseException | None
) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


class LineReader:
    """Reads stdin lines in a thread; one pending read at a time (readline history on a tty)."""

    def __init__(self, stream: TextIO, interactive: bool, history_file: Path | None) -> None:
        self.stream = stream
        self.interactive = interactive
        self._pending: asyncio.Future[str | None] | None = None
        self._asked: tuple[str, str] = ("", "")
        self._requests: queue.SimpleQueue[Any] | None = None  # for the reading thread
        self._history_file = history_file
        if interactive:
            with contextlib.suppress(ImportError, OSError):
                import readline

                if history_file and history_file.exists():
                    readline.read_history_file(str(history_file))
                readline.set_history_length(1000)

    def _read(self, prompt: str) -> str | None:
        try:
            if self.interactive:
                return input(prompt)
            line = self.stream.readline()
            return None if line == "" else line.rstrip("\n")
        except EOFError:
            return None

    async def read(
        self,
        prompt: str = "",
        *,
        purpose: str = "message",
        on_stale: Callable[[], None] | None = None,
    ) -> str | None:
        """The next line typed in answer to ``prompt``.

        A line still being typed in answer to another question (an approval that timed out)
        is never handed to this one: it is awaited and dropped, then this prompt is shown.
        """
        pending = self._pending
        if pending is not None and not pending.done() and self._asked != (purpose, prompt):
            if on_stale is not None:
                on_stale()
            await asyncio.shield(pending)
            self._pending = None
        future = self._pending
        if future is None or future.done():
            future = self._pending = self._start(prompt, purpose)
        return await asyncio.shield(future)

    def _start(self, prompt: str, purpose: str) -> asyncio.Future[str | None]:
        """Ask the reading thread for one line; the future it returns gets the line."""
        self._asked = (purpose, prompt)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[str | None] = loop.create_future()
        if self._requests is None:
            self._requests = queue.SimpleQueue()
            # A daemon thread, not the default executor: a read blocked on the terminal must
            # never keep the process alive at shutdown.
            args = (self._requests,)
            threading.Thread(target=self._serve, args=args, name="luna-stdin", daemon=True).start()
        self._requests.put((prompt, loop, future))
        return future

    def _serve(self, requests: queue.SimpleQueue[Any]) -> None:
        """The reading thread: one line per request, in order, handed to its loop."""
        while True:
            prompt, loop, future = requests.get()
            try:
                line, error = self._read(prompt), None
            except BaseException as e:  # handed to the awaiting task
                line, error = None, e
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits
                loop.call_soon_threadsafe(_settle, future, line, error)

    def waiting_line(self) -> str | None:
        """The prompt and what was typed so far while a read waits for Enter, else None."""
        if self._pending is None or self._pending.done():
            return None
        typed = ""
        if self.interactive:
            with contextlib.suppress(ImportError):
                import readline

                typed = readline.get_line_buffer()
        return self._asked[1] + typed

    def save_history(self) -> None:
        if self.interactive and self._history_file:
            with contextlib.suppress(ImportError, OSError):
                import readline

                self._history_file.parent.mkdir(parents=True, exist_ok=True)
                readline.write_history_file(str(self._history_file))
