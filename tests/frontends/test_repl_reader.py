"""The REPL's line reader never hands an answer typed for one question to another; it reads in
one thread started once."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import TextIO

import pytest

from luna.frontends.line_reader import LineReader
from luna.frontends.repl import new_session_id


async def test_reader_drops_a_line_typed_for_an_expired_question() -> None:
    read_fd, write_fd = os.pipe()
    with os.fdopen(read_fd, "r") as stream, os.fdopen(write_fd, "w") as typist:
        watched = _WatchedStream(stream, asyncio.get_running_loop())
        reader = LineReader(watched, interactive=False, history_file=None)  # type: ignore[arg-type]
        with pytest.raises(TimeoutError):  # the first approval request times out unanswered
            await asyncio.wait_for(reader.read("allow ls?", purpose="approval"), 0.2)
        assert await watched.started.get() == 1
        stale = asyncio.Event()
        second = asyncio.ensure_future(
            reader.read("allow rm -rf?", purpose="approval", on_stale=stale.set)
        )
        await asyncio.wait_for(stale.wait(), 5)  # the second question saw the first still open
        assert reader.waiting_line() == "allow ls?"
        typist.write("y\n")  # typed while "allow ls?" was still on screen
        typist.flush()
        assert await asyncio.wait_for(watched.started.get(), 5) == 2  # a fresh read began
        assert not second.done()  # the "y" went to the expired question, not this one
        typist.write("n\n")
        typist.flush()
        assert await asyncio.wait_for(second, 5) == "n"
        # A message read after an answered approval starts fresh.
        typist.write("hello\n")
        typist.flush()
        assert await asyncio.wait_for(reader.read(""), 5) == "hello"


async def test_reader_reads_every_line_in_one_thread_started_once() -> None:
    read_fd, write_fd = os.pipe()
    with os.fdopen(read_fd, "r") as stream, os.fdopen(write_fd, "w") as typist:
        watched = _WatchedStream(stream, asyncio.get_running_loop())
        reader = LineReader(watched, interactive=False, history_file=None)  # type: ignore[arg-type]
        typist.write("one\ntwo\nthree\n")
        typist.flush()
        assert [await asyncio.wait_for(reader.read(""), 5) for _ in range(3)] == [
            "one",
            "two",
            "three",
        ]
        assert len(set(watched.threads)) == 1  # no thread (and no wait for one) per line


class _WatchedStream:
    """A pipe's read end that tells the test each time the reader starts reading a line."""

    def __init__(self, stream: TextIO, loop: asyncio.AbstractEventLoop) -> None:
        self.stream, self.loop, self.started = stream, loop, asyncio.Queue[int]()
        self.calls = 0
        self.threads: list[threading.Thread] = []

    def readline(self) -> str:
        self.calls += 1
        self.threads.append(threading.current_thread())
        self.loop.call_soon_threadsafe(self.started.put_nowait, self.calls)
        return self.stream.readline()


def test_new_session_ids_differ_within_one_second() -> None:
    ids = {new_session_id() for _ in range(50)}
    assert len(ids) == 50 and all(i.startswith("repl-") for i in ids)
