"""Forgetting a session on the page in a real browser (headless Debian chromium, Playwright)
against a real ``python -m luna web`` process: the header's button and its dialog (what goes,
keep the memories, Escape, focus), the session, its file and its memory gone; a turn running
in the session refused in one line, then the forget with the memories kept. Screenshots go to
test-artifacts/web/."""

# ruff: noqa: F811 - the browser test's fixtures are imported, and tests name them as arguments

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from luna.attachments.store import AttachmentStore, attachments_dir, digest
from tests.fakes.attachments import photo
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.frontends.web.process import LunaWebProcess
from tests.frontends.web.test_web_browser import (  # noqa: F401 - fixtures
    _memory,
    api,
    fake_llm,
    log_in,
    luna_web,
    new_session,
    page,
    send,
    shot,
)

pytestmark = pytest.mark.timeout(600)

BUSY = "A turn is running in this session: forget it once Luna has answered."


async def remember_in(luna_web: LunaWebProcess, session: str, text: str) -> int:
    """A memory learned in ``session``, written beside the running Luna (as the CLI writes)."""
    memory = _memory(luna_web)
    await memory.open(background=False)
    try:
        return await memory.add_memory(text, session_id=session)
    finally:
        await memory.close()


async def memory_texts(luna_web: LunaWebProcess) -> list[str]:
    async with api(luna_web) as client:
        return [m["text"] for m in (await client.get("/api/memory")).json()["memories"]]


async def current_session(page: Any) -> str:
    return str(await page.evaluate("localStorage.getItem('luna.session')"))


async def focused(page: Any) -> str:
    return str(await page.evaluate("document.activeElement?.id || ''"))


async def test_forget_session_from_the_page_removes_it_its_file_and_memory(
    page: Any, luna_web: LunaWebProcess, fake_llm: FakeLLMServer
) -> None:
    await log_in(page, luna_web.url)
    await new_session(page)
    assert await page.locator("#forget-session").is_hidden()  # nothing saved: nothing to forget
    picture = photo(160, 120, fmt="PNG", seed=31)
    fake_llm.script(Reply(content="A small test picture."))
    await page.set_input_files(
        "#attach-input", files=[{"name": "pic.png", "mimeType": "image/png", "buffer": picture}]
    )
    await send(page, "what is this?")
    await page.wait_for_selector("#messages .msg.assistant:has-text('A small test picture.')")
    session = await current_session(page)
    await page.wait_for_selector(f"#session-list li[data-id='{session}']:not(.unsaved)")
    files = AttachmentStore(attachments_dir(luna_web.folder / "data"))
    assert files.has(digest(picture))
    await remember_in(luna_web, session, "the test picture is a small PNG")

    # The keyboard opens it; focus starts on Cancel; Escape closes it and keeps everything.
    button = page.locator("#forget-session")
    await button.wait_for()
    await button.focus()
    await page.keyboard.press("Enter")
    dialog = page.locator("#forget-dialog[open]")
    await dialog.wait_for()
    items = await page.locator("#forget-list li").all_text_contents()
    assert items[0].startswith("2 messages, 20")
    assert items[1:] == [
        "1 attached file, unless another session has it too",
        "1 memory learned in it",
    ]
    assert await page.locator("#forget-name").text_content() == "what is this?"
    assert await page.locator("#forget-keep-memories").is_visible()
    assert await focused(page) == "forget-cancel"
    await shot(page, "forget-01-dialog")
    await page.keyboard.press("Escape")
    await dialog.wait_for(state="detached")
    assert await focused(page) == "forget-session"
    assert await page.locator(f"#session-list li[data-id='{session}']").count() == 1

    # A second window on the same session moves on when the first one forgets it.
    other = await page.context.new_page()
    other_errors: list[str] = []
    other.on("pageerror", lambda e: other_errors.append(str(e)))
    await other.goto(luna_web.url + "/")
    await other.wait_for_selector("#connection.live")
    assert await other.text_content("#session-title") == f"session {session}"

    await button.click()
    await dialog.wait_for()
    await page.click("#forget-confirm")
    await dialog.wait_for(state="detached")
    status = page.locator("#session-status")
    await status.wait_for()
    assert await status.text_content() == (
        "Session forgotten: 2 messages, 1 file removed, 1 memory forgotten."
    )
    await page.wait_for_function(
        "s => localStorage.getItem('luna.session') !== s && document.activeElement.id === 'input'",
        arg=session,
    )
    assert await page.locator(f"#session-list li[data-id='{session}']").count() == 0
    assert await page.locator("#session-list li.active").text_content() == "(new session)"
    assert await page.locator("#messages .msg").count() == 0
    assert await button.is_hidden()
    await shot(page, "forget-02-forgotten")
    await other.wait_for_selector(f"#session-list li[data-id='{session}']", state="detached")
    await other.wait_for_function(
        "t => document.querySelector('#session-status').textContent === t",
        arg="This session was forgotten in another window.",
    )
    assert await other.text_content("#session-title") != f"session {session}"
    await other.close()
    assert not other_errors, other_errors

    async with api(luna_web) as client:
        assert (await client.get(f"/api/sessions/{session}")).status_code == 404
        assert (await client.delete(f"/api/sessions/{session}")).status_code == 404
        history = await client.get(f"/api/sessions/{session}/messages")
        assert history.status_code == 200 and history.json()["messages"] == []
        listed = (await client.get("/api/sessions")).json()["sessions"]
        assert session not in [s["id"] for s in listed]
    assert not files.has(digest(picture))
    assert "the test picture is a small PNG" not in await memory_texts(luna_web)


async def test_forget_refused_while_a_turn_runs_then_keeps_the_memories(
    page: Any, luna_web: LunaWebProcess, fake_llm: FakeLLMServer
) -> None:
    await log_in(page, luna_web.url)
    await new_session(page)
    fake_llm.script(Reply(content="Hello there."))
    await send(page, "hello")
    await page.wait_for_selector("#messages .msg.assistant:has-text('Hello there.')")
    session = await current_session(page)
    await remember_in(luna_web, session, "the owner greets with hello")
    async with api(luna_web) as client:
        task = {"text": "water the plants", "after": "1d", "session_id": session}
        made = await client.post("/api/schedules", json=task)
        assert made.status_code == 201, made.text

    release = threading.Event()

    def held(body: dict[str, Any]) -> Reply:  # runs in the scripted server's thread
        release.wait(120)
        return Reply(content="Done at last.")

    fake_llm.script(held)
    try:
        await send(page, "take your time")
        await asyncio.to_thread(fake_llm.wait_for_requests, 2, 60)  # the turn is in the LLM
        await page.click("#forget-session")
        await page.locator("#forget-dialog[open]").wait_for()
        tasks = page.locator("#forget-dialog .tasks")
        assert (
            await tasks.text_content() == "1 scheduled task made in it will go on (see Schedules)."
        )
        await page.check("#forget-keep-memories")
        assert await page.locator("#forget-list .memories").text_content() == (
            "1 memory learned in it: kept, not removed"
        )
        await page.click("#forget-confirm")
        error = page.locator("#forget-error")
        await page.wait_for_function(
            "t => document.querySelector('#forget-error').textContent === t", arg=BUSY
        )
        assert await error.get_attribute("role") == "alert"
        assert await page.locator("#forget-dialog").get_attribute("open") is not None
        assert await page.locator("#forget-confirm").is_enabled()
        await shot(page, "forget-03-turn-running")
    finally:
        await asyncio.to_thread(release.set)
    await page.wait_for_selector("#messages .msg.assistant:has-text('Done at last.')")
    await page.wait_for_selector("#messages .turn.finished")

    await page.click("#forget-confirm")  # the same dialog, memories still kept
    await page.locator("#forget-dialog[open]").wait_for(state="detached")
    await page.wait_for_function(
        "() => document.querySelector('#session-status').textContent.startsWith('Session')"
    )
    assert await page.locator("#session-status").text_content() == (
        "Session forgotten: 4 messages, no files removed, no memories forgotten."
    )
    await page.wait_for_selector(f"#session-list li[data-id='{session}']", state="detached")
    assert await current_session(page) != session
    assert "the owner greets with hello" in await memory_texts(luna_web)
    async with api(luna_web) as client:
        listed = (await client.get("/api/schedules")).json()
    assert "water the plants" in str(listed)
