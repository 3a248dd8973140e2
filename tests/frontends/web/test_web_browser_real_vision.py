"""A photo attached on the page, in a real browser (headless Debian chromium, Playwright), reaches
the real llama-server with a vision projector (tests/real_llama.py, ``vision=True``) through a
real ``python -m luna web``: the server decodes it, and the next turn sends the same bytes."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from luna.memory.storage.request_log import RequestLog
from tests.fakes.attachments import photo
from tests.frontends.web.browser import browser_page
from tests.frontends.web.process import LunaWebProcess
from tests.frontends.web.test_web_browser import log_in, new_session, send, shot
from tests.real_llama import ALIAS, RealLlama

pytestmark = pytest.mark.timeout(600)

IMAGE_DECODED = re.compile(r"image decoded \(batch 1/1\)")
ANSWERED = "#messages .msg.assistant"


def _images(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        p
        for m in messages
        if isinstance(m.get("content"), list)
        for p in m["content"]
        if p.get("type") == "image_url"
    ]


async def test_page_photo_reaches_the_real_vision_server_and_is_resent_as_is(
    tmp_path: Path, real_llama: Callable[..., RealLlama]
) -> None:
    real = real_llama("luna", fresh_server=True, vision=True)
    config = (
        f'[llm]\nmodel = "{ALIAS}"\nmax_tokens = 16\ntemperature = 0.0\n'
        "[memory]\nlibrarian = false\n"
    )
    luna = LunaWebProcess(tmp_path, real.url, config).start()
    try:
        async with browser_page() as page:
            await log_in(page, luna.url)
            await new_session(page)
            await page.set_input_files(
                "#attach-input",
                files=[{"name": "street.jpg", "mimeType": "image/jpeg", "buffer": photo(640, 480)}],
            )
            await page.locator("#attachments .chip").first.wait_for()
            await send(page, "What is in this photo?")
            await page.locator(ANSWERED).first.wait_for(timeout=300_000)
            assert await page.locator("#messages .file").all_text_contents() == [
                "attached: street.jpg"
            ]
            await send(page, "And its colours?")
            await page.locator(ANSWERED).nth(1).wait_for(timeout=300_000)
            await shot(page, "attach-real-vision")
            assert not page.errors, page.errors
    finally:
        assert luna.stop() == 0, "".join(luna.stderr)
    assert len(IMAGE_DECODED.findall(real.log_path.read_text(errors="replace"))) == 1
    log = RequestLog(tmp_path / "data" / "requests.db")
    (session,) = [s["session_id"] for s in log.sessions()]
    chat = log.for_session(session)
    assert chat and not any(r.error for r in chat), [r.error for r in chat]
    turns = list(dict.fromkeys(r.turn_id for r in chat))
    assert len(turns) == 2
    sent = _images(chat[0].messages)
    assert len(sent) == 1 and sent[0]["image_url"]["url"].startswith("data:image/")
    assert all(_images(r.messages) == sent for r in chat)  # byte for byte, every request
    next_turn = next(r for r in chat if r.turn_id == turns[1])
    # One slot, and the describer waits for quiet: turn 2 reuses the photo's KV.
    assert (next_turn.cached_tokens or 0) > (next_turn.prompt_tokens or 0) * 0.9
