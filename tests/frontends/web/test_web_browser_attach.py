"""Attaching files on the page in a real browser (headless Debian chromium, Playwright) against
a real ``python -m luna web`` process: the button, a paste and a drop; a refused file's line.
Screenshots go to test-artifacts/web/."""

# ruff: noqa: F811 - the browser test's fixtures are imported, and tests name them as arguments

from __future__ import annotations

import base64
import sqlite3
from typing import Any

import pytest

from tests.fakes.attachments import photo
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.frontends.web.process import LunaWebProcess
from tests.frontends.web.test_web_browser import (  # noqa: F401 - fixtures
    fake_llm,
    log_in,
    luna_web,
    new_session,
    page,
    send,
    shot,
)

pytestmark = pytest.mark.timeout(600)

# Puts a file made from base64 bytes into a DataTransfer and fires ``kind`` (paste or drop) at
# ``target``, as the browser does when a person pastes a screenshot or drops a file.
FIRE = """([target, kind, name, type, b64]) => {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const data = new DataTransfer();
  data.items.add(new File([bytes], name, { type }));
  const node = document.querySelector(target);
  const event = kind === "paste"
    ? new ClipboardEvent("paste", { clipboardData: data, bubbles: true, cancelable: true })
    : new DragEvent("drop", { dataTransfer: data, bubbles: true, cancelable: true });
  node.dispatchEvent(event);
}"""


def last_user_text(fake_llm: FakeLLMServer) -> str:
    content = fake_llm.requests[-1]["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content if p.get("type") == "text")


async def test_attach_paste_and_drop_send_files_with_the_message(
    page: Any, luna_web: LunaWebProcess, fake_llm: FakeLLMServer
) -> None:
    await log_in(page, luna_web.url)
    await new_session(page)
    fake_llm.script(Reply(content="I see three pictures."), Reply(content="Noted."))
    await page.set_input_files(
        "#attach-input",
        files=[{"name": "holiday.jpg", "mimeType": "image/jpeg", "buffer": photo(800, 600)}],
    )
    png = base64.b64encode(photo(120, 80, fmt="PNG", seed=2)).decode()
    await page.evaluate(FIRE, ["#input", "paste", "image.png", "image/png", png])
    drop = base64.b64encode(photo(90, 60, fmt="PNG", seed=3)).decode()
    await page.evaluate(FIRE, ["#composer", "drop", "diagram.png", "image/png", drop])
    chips = page.locator("#attachments .chip")
    await chips.nth(2).wait_for()
    assert [t.split(" (")[0] for t in await chips.all_text_contents()] == [
        "holiday.jpg",
        "pasted-2.png",
        "diagram.png",
    ]
    await shot(page, "attach-01-chips")
    await send(page, "What are these?")
    await page.wait_for_selector("#messages .msg.assistant:has-text('I see three pictures.')")
    files = page.locator("#messages .file")
    assert await files.all_text_contents() == [
        "attached: holiday.jpg",
        "attached: pasted-2.png",
        "attached: diagram.png",
    ]
    assert await page.locator("#attachments").is_hidden()  # sent: the chips are gone
    assert "What are these?" in last_user_text(fake_llm)
    await shot(page, "attach-02-sent")

    await page.set_input_files(
        "#attach-input",
        files=[{"name": "notes.png", "mimeType": "image/png", "buffer": b"only words here"}],
    )
    await send(page, "and this one?")
    refused = page.locator("#messages .refused")
    await refused.wait_for()
    assert await refused.text_content() == "not taken: notes.png: not an image: its bytes are text"
    await page.wait_for_selector("#messages .msg.assistant:has-text('Noted.')")
    assert "[not taken: notes.png: not an image" in last_user_text(fake_llm)
    await shot(page, "attach-03-refused")

    await page.reload()  # the history, drawn from the log, shows the files too
    await page.wait_for_selector("#messages .msg.assistant:has-text('Noted.')")
    assert await page.locator("#messages .file").all_text_contents() == [
        "attached: holiday.jpg",
        "attached: pasted-2.png",
        "attached: diagram.png",
    ]

    with sqlite3.connect(luna_web.db_path) as db:
        names = [r[0] for r in db.execute("SELECT name FROM message_attachments ORDER BY rowid")]
    assert names == ["holiday.jpg", "pasted-2.png", "diagram.png"]
