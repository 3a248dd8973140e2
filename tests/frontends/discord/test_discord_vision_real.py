"""A photo sent on Discord (dpytest, the real bot and channel layer, a loopback CDN) reaches the
real llama-server with a vision projector (tests/real_llama.py, ``vision=True``), which
decodes it: the whole path from a chat app's file to the model's image tokens."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.attachments import photo
from tests.fakes.file_host import FileHost
from tests.frontends.discord.test_discord_files import send
from tests.real_llama import ALIAS, RealLlama

IMAGE_DECODED = re.compile(r"image decoded \(batch 1/1\)")


def decoded(real: RealLlama) -> int:
    return len(IMAGE_DECODED.findall(Path(real.log_path).read_text(errors="replace")))


@pytest.fixture
def vision_server(real_llama: Callable[..., RealLlama]) -> RealLlama:
    """The shared vision server, started here in the main thread: a server started from a
    worker thread gets its death signal when that thread ends (PR_SET_PDEATHSIG follows the
    thread), which killed it for every later test that shares it."""
    return real_llama("luna", vision=True)


async def test_discord_photo_is_decoded_by_the_real_vision_server(
    make_harness: Callable[..., Any], vision_server: RealLlama, cdn: FileHost
) -> None:
    real = vision_server
    # Not the harness's max_retries = 0 (meant for scripted servers): a real one gets the usual.
    llm = {"endpoint": real.url, "model": ALIAS, "max_tokens": 24, "temperature": 0.0,
           "timeout": 300.0}  # fmt: skip
    h = await make_harness(llm=llm, memory={"librarian": False})
    h.agent.tools_enabled = False  # as for the demo model: noise must not call tools
    before = decoded(real)
    image = photo(2400, 1800)
    url = cdn.add("street.jpg", image)
    await send(h, "what do you see?", [("street.jpg", url, len(image), "image/jpeg")])
    await asyncio.wait_for(h.turns.wait_for(1), timeout=300)
    _summary, records = await h.memory.prompt_history(f"dm-{h.owner.id}")
    assert [r.role for r in records] == ["user", "assistant"]  # answered, not failed
    assert [(a.kind, a.mime) for a in records[0].attachments] == [("image", "image/jpeg")]
    await h.agent.drain(0)  # no image description in the background: the count is the turn's
    assert decoded(real) > before  # the server turned the photo into image tokens
    print(f"image decoded {decoded(real) - before} time(s); reply {records[1].content!r}")
