"""The REPL's line reader never hands an answer typed for one question to another."""

from __future__ import annotations

import asyncio
import os

import pytest

from luna.frontends.repl import LineReader, new_session_id


async def test_reader_drops_a_line_typed_for_an_expired_question() -> None:
    read_fd, write_fd = os.pipe()
    with os.fdopen(read_fd, "r") as stream, os.fdopen(write_fd, "w") as typist:
        reader = LineReader(stream, interactive=False, history_file=None)
        with pytest.raises(TimeoutError):  # the first approval request times out unanswered
            await asyncio.wait_for(reader.read("allow ls?", purpose="approval"), 0.2)
        notices: list[str] = []
        second = asyncio.ensure_future(
            reader.read("allow rm -rf?", purpose="approval", on_stale=lambda: notices.append("x"))
        )
        await asyncio.sleep(0.1)
        typist.write("y\n")  # typed while "allow ls?" was still on screen
        typist.flush()
        await asyncio.sleep(0.2)
        assert not second.done() and notices == ["x"]
        typist.write("n\n")
        typist.flush()
        assert await asyncio.wait_for(second, 5) == "n"
        # A message read after an answered approval starts fresh.
        typist.write("hello\n")
        typist.flush()
        assert await asyncio.wait_for(reader.read(""), 5) == "hello"


def test_new_session_ids_differ_within_one_second() -> None:
    ids = {new_session_id() for _ in range(50)}
    assert len(ids) == 50 and all(i.startswith("repl-") for i in ids)
