"""The page in a real browser: headless Debian chromium (Playwright) against a real
``python -m luna web`` process and the scripted LLM. Screenshots go to test-artifacts/web/.

Covers: log in; send a message and watch it stream; see a tool call; approve one; search
memory, see provenance and supersession, forget an item; the charts render with data;
settings with sources and an edit; XSS payloads in a reply, a tool result and a memory show as
text; a 10,000-message session; a cross-site page cannot act with the token or the cookie.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from luna.config import build_config
from luna.memory import Memory
from luna.messages import BIDI_CONTROLS
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.frontends.web.browser import browser_page
from tests.frontends.web.conftest import TOKEN, XSS
from tests.frontends.web.process import LunaWebProcess, artifacts_dir

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def fake_llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


@pytest.fixture(scope="module")
def luna_web(
    tmp_path_factory: pytest.TempPathFactory, fake_llm: FakeLLMServer
) -> Iterator[LunaWebProcess]:
    folder = tmp_path_factory.mktemp("luna-web")
    proc = LunaWebProcess(folder, fake_llm.url, "[tools]\napproval_timeout = 60.0\n").start()
    asyncio.run(_warm_up(proc))
    yield proc
    assert proc.stop() == 0, "".join(proc.stderr)


async def _warm_up(proc: LunaWebProcess) -> None:
    """One memory written and forgotten: the process's first embedding exports the model to
    ONNX (half a minute on a busy machine), here rather than inside a page's wait."""
    async with httpx.AsyncClient(
        base_url=proc.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=300
    ) as client:
        made = await client.post("/api/memory", json={"text": "warm-up"})
        assert made.status_code == 201, made.text
        assert (await client.delete(f"/api/memory/{made.json()['id']}")).status_code == 200


@pytest.fixture
async def page(luna_web: LunaWebProcess, fake_llm: FakeLLMServer) -> AsyncIterator[Any]:
    fake_llm.reset()
    async with browser_page() as p:
        yield p
    assert not p.errors, p.errors


def api(luna_web: LunaWebProcess) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=luna_web.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
    )


async def shot(page: Any, name: str) -> Path:
    path = artifacts_dir() / f"{name}.png"
    await page.screenshot(path=str(path))
    return path


async def log_in(page: Any, url: str) -> None:
    await page.goto(url + "/")
    await page.wait_for_selector("#login-form", state="visible")
    await page.fill("#login-token", TOKEN)
    await page.click("#login-form button")
    await page.wait_for_selector("#app", state="visible")
    await page.wait_for_selector("#connection.live")


async def new_session(page: Any) -> None:
    before = await page.text_content("#session-title")
    await page.click("#new-session")
    await page.wait_for_function(
        "t => document.querySelector('#session-title').textContent !== t", arg=before
    )


async def send(page: Any, text: str) -> None:
    await page.fill("#input", text)
    await page.press("#input", "Enter")


async def test_login_stream_and_tool_call(
    page: Any, luna_web: LunaWebProcess, fake_llm: FakeLLMServer
) -> None:
    await page.goto(luna_web.url + "/")
    await page.wait_for_selector("#login-form", state="visible")
    await shot(page, "01-login")
    await page.fill("#login-token", "not-the-token-at-all")
    await page.click("#login-form button")
    await page.wait_for_selector("#login-error:has-text('Wrong token')")
    await log_in(page, luna_web.url)
    cookies = await page.context.cookies()
    assert [c["name"] for c in cookies] == ["luna_login"]
    assert cookies[0]["httpOnly"] and cookies[0]["sameSite"] == "Strict"
    assert TOKEN not in json.dumps(await page.evaluate("({...localStorage})"))
    await new_session(page)
    (luna_web.workspace / "notes.txt").write_text("shopping list\n")
    answer = (
        "Your workspace holds one file, notes.txt, which looks like a shopping list. "
        "Want me to read it out loud, or add something to it?"
    )
    fake_llm.script(
        Reply(tool_calls=[{"name": "list_directory", "arguments": {"path": "."}}]),
        Reply(content=answer, chunk_size=3, chunk_delay=0.06),
    )
    await send(page, "What is in my workspace?")
    tool = page.locator("#messages details.tool", has_text="list_directory")
    await tool.wait_for()
    await page.wait_for_selector("#messages details.tool.tool-ok")
    streaming = page.locator("#messages .msg.assistant.streaming .text")
    await streaming.wait_for()
    await page.wait_for_function(
        "() => (document.querySelector('.msg.assistant.streaming .text')?.textContent || '')"
        ".length > 20"
    )
    partial = await streaming.text_content()
    await shot(page, "02-chat-streaming")
    await page.wait_for_selector("#messages .turn.finished")
    final = await page.locator("#messages .msg.assistant .text").last.text_content()
    assert partial and len(partial) < len(answer) and answer.startswith(partial)
    assert final == answer
    await tool.locator("summary").click()
    assert "notes.txt" in await tool.locator(".tool-result").text_content()
    await shot(page, "03-chat-tool-call")
    # A reload shows the same conversation from the session log.
    await page.reload()
    await page.wait_for_selector("#messages .msg.assistant")
    assert answer in await page.text_content("#messages")
    assert await page.locator("#messages details.tool", has_text="list_directory").count() == 1


async def test_approve_a_tool_from_the_page(
    page: Any, luna_web: LunaWebProcess, fake_llm: FakeLLMServer
) -> None:
    await log_in(page, luna_web.url)
    await new_session(page)
    fake_llm.script(
        Reply(
            tool_calls=[
                {"name": "write_file", "arguments": {"path": "todo.txt", "content": "buy milk"}}
            ]
        ),
        Reply(content="Saved your todo."),
    )
    await send(page, "Write 'buy milk' to todo.txt")
    card = page.locator("#messages .approval")
    await card.wait_for()
    assert "write_file" in await card.text_content() and "buy milk" in await card.text_content()
    await page.wait_for_selector("#approval-count:has-text('1')")
    await shot(page, "04-approval-asked")
    await card.locator("button.approve").click()
    await page.wait_for_selector("#messages .approval.resolved:has-text('approved')")
    await page.wait_for_selector("#messages details.tool.tool-ok:has-text('write_file')")
    await page.wait_for_selector("#messages .turn.finished")
    assert (luna_web.workspace / "todo.txt").read_text() == "buy milk"
    assert await page.is_hidden("#approval-count")
    await shot(page, "05-approval-approved")


def _memory(luna_web: LunaWebProcess) -> Memory:
    cfg = build_config({}, {"MEMORY_DB_PATH": str(luna_web.db_path)}, base_dir=luna_web.folder)
    return Memory(cfg.memory)


async def test_memory_search_provenance_supersession_and_forget(
    page: Any, luna_web: LunaWebProcess
) -> None:
    await log_in(page, luna_web.url)
    await page.click("#tabs button[data-view=memory]")
    for text in ("My bike is a red Brompton", "My bike is a green Brompton (repainted)"):
        before = await page.text_content("#memory-status")
        await page.fill("#memory-text", text)
        await page.click("#memory-add button")
        await page.wait_for_function(
            "t => /remembered/.test(document.querySelector('#memory-status').textContent)"
            " && document.querySelector('#memory-status').textContent !== t",
            arg=before,
        )
    async with api(luna_web) as client:
        rows = (await client.get("/api/memory")).json()["memories"]
    ids = {r["text"]: r["id"] for r in rows}
    old, new = ids["My bike is a red Brompton"], ids["My bike is a green Brompton (repainted)"]
    memory = _memory(luna_web)  # a second connection to the same database, as the CLI is
    await memory.open(background=False)
    try:
        await memory.supersede(old, new)
    finally:
        await memory.close()
    await page.fill("#memory-query", "Brompton bike")
    await page.click("#memory-search button[type=submit]")
    row = page.locator(f"#memory-results tr[data-id='{old}']")
    await row.wait_for()
    assert f"superseded by #{new}" in await row.text_content()
    await row.click()
    detail = page.locator("#memory-detail")
    await detail.locator("h3", has_text=f"Memory #{old}").wait_for()
    text = await detail.text_content()
    assert "Replaced by" in text and "green Brompton" in text and "source" in text
    await shot(page, "06-memory-search-detail")
    await detail.locator("button.forget").click()
    await detail.locator("button.forget.confirm").click()
    await page.wait_for_selector(f"#memory-detail .forgotten:has-text('#{old}')")
    await page.wait_for_function(
        f"() => !document.querySelector(\"#memory-results tr[data-id='{old}']\")"
    )
    await shot(page, "07-memory-forgotten")
    async with api(luna_web) as client:
        assert (await client.get(f"/api/memory/{old}")).status_code == 404


def _write_history_logs(log_dir: Path) -> None:
    """Six earlier days of events, in the format Luna's event log writes."""
    log_dir.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    for back in range(1, 7):
        day = now - dt.timedelta(days=back)
        lines = []
        for i in range(3 + back):
            ts = (day + dt.timedelta(minutes=i)).isoformat(timespec="milliseconds")
            prompt = 4000 + 900 * back + 50 * i
            cached = int(prompt * (0.5 + 0.07 * back))
            lines += [
                {"ts": ts, "event": "llm_call", "prompt_tokens": prompt, "completion_tokens": 300,
                 "cached_tokens": cached, "prefilled_tokens": prompt - cached, "prompt_ms": 80.0,
                 "latency_ms": 900.0, "error": None},
                {"ts": ts, "event": "tool_run", "tool": "bash", "duration_ms": 40.0,
                 "is_error": i % 3 == 0, "output_bytes": 10},
                {"ts": ts, "event": "turn", "session_id": f"s{back}", "rounds": 1,
                 "latency_ms": 1000.0 + 300 * i + 100 * back, "error": None},
            ]  # fmt: skip
        path = log_dir / f"luna-{day.date().isoformat()}.jsonl"
        path.write_text("".join(json.dumps(x) + "\n" for x in lines))


async def test_usage_charts_render_with_data(page: Any, luna_web: LunaWebProcess) -> None:
    _write_history_logs(luna_web.log_dir)
    await log_in(page, luna_web.url)
    await page.click("#tabs button[data-view=usage]")
    await page.select_option("#usage-days", "7")
    await page.wait_for_selector("#usage-summary .stat")
    await page.wait_for_selector("#tool-runs td code")
    painted = await page.evaluate(
        """() => [...document.querySelectorAll('.charts canvas')].map(c => {
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++;
            return [c.id, c.width, n];
        })"""
    )
    assert len(painted) == 4
    for name, width, pixels in painted:
        assert width > 100 and pixels > 2000, (name, pixels)
    summary = await page.text_content("#usage-summary")
    assert "turns" in summary and "prompt tokens" in summary
    await shot(page, "08-usage-charts")


async def test_settings_show_sources_and_edit_through_config_set(
    page: Any, luna_web: LunaWebProcess
) -> None:
    await log_in(page, luna_web.url)
    await page.click("#tabs button[data-view=settings]")
    token_row = page.locator("#config-table tr[data-key='web.token']")
    await token_row.wait_for()
    assert TOKEN not in await token_row.text_content()
    assert "env LUNA_WEB_TOKEN" in await token_row.text_content()
    await page.fill("#config-filter", "agent.")
    assert await page.is_hidden("#config-table tr[data-key='web.token']")
    row = page.locator("#config-table tr[data-key='agent.max_rounds']")
    await row.locator("button.edit").click()
    await row.locator("input").fill("0")
    await row.locator("button.save").click()
    await page.wait_for_selector("#config-status.error:has-text('out of range')")
    await row.locator("input").fill("12")
    await row.locator("button.save").click()
    await page.wait_for_selector("#config-status.ok:has-text('restart')")
    await page.wait_for_selector(
        "#config-table tr[data-key='agent.max_rounds'] td.pending:has-text('12')"
    )
    assert "max_rounds = 12" in (luna_web.folder / "config.toml").read_text()
    await shot(page, "09-settings")


async def test_xss_in_reply_tool_result_and_memory_shows_as_text(
    page: Any, luna_web: LunaWebProcess, fake_llm: FakeLLMServer
) -> None:
    (luna_web.workspace / "evil.html").write_text(f"<html>{XSS}</html>")
    await log_in(page, luna_web.url)
    await new_session(page)
    fake_llm.script(
        Reply(tool_calls=[{"name": "read_file", "arguments": {"path": "evil.html"}}]),
        Reply(content=f"The page says: {XSS}"),
    )
    await send(page, "read evil.html")
    await page.wait_for_selector("#messages .turn.finished")
    reply = await page.locator("#messages .msg.assistant .text").last.text_content()
    assert XSS in reply
    tool = page.locator("#messages details.tool", has_text="read_file")
    await tool.locator("summary").click()
    assert XSS in await tool.locator(".tool-result").text_content()
    async with api(luna_web) as client:
        await client.post("/api/memory", json={"text": f"note {XSS}"})
    await shot(page, "10-xss-chat")
    await page.click("#tabs button[data-view=memory]")
    await page.click("#memory-list-all")
    await page.wait_for_selector("#memory-results td:has-text('window.__pwned')")
    assert await page.evaluate("window.__pwned") is None
    assert await page.locator("img").count() == 0
    assert await page.locator("script:not([src])").count() == 0
    await shot(page, "11-xss-memory")


MARKDOWN_REPLY = """## Plan

Here is **bold**, *italic* and `inline <b>code</b>`.

- one
- two

| a | b |
|---|---|
| 1 | 2 |

```python
print("<b>hi</b>")
```

[docs](https://example.com/docs) and www.example.org

Hostile: [js](javascript:window.__pwned=3) [data](data:text/html;base64,PHNjcmlwdD4=)
[ref][1] <javascript:window.__pwned=5> ![pic](http://127.0.0.1:9/x.png) [rel](/api/me)
<a href="https://example.com" onclick="window.__pwned=6">raw link</a>

<div onclick="window.__pwned=7">raw block</div>
<script>window.__pwned=4</script>
<img src=x onerror="window.__pwned=8"><svg onload="window.__pwned=9"></svg>
<iframe src="https://example.com"></iframe><style>body{display:none}</style>

[1]: javascript:window.__pwned=10
"""
FORBIDDEN = "script, img, svg, iframe, style, object, embed, form, input, link, meta, video"
INSPECT = """sel => {
  const box = document.querySelector(sel);
  const all = [...document.querySelectorAll('#messages *')];
  return {
    tags: [...new Set([...box.querySelectorAll('*')].map(e => e.tagName.toLowerCase()))],
    on: all.flatMap(e => [...e.attributes].map(a => a.name)).filter(n => n.startsWith('on')),
    links: [...box.querySelectorAll('a')].map(a => [a.getAttribute('href'), a.rel, a.target]),
    forbidden: document.querySelectorAll('#messages :is(FORBIDDEN)').length,
    text: box.textContent,
    pwned: window.__pwned ?? null,
  };
}""".replace("FORBIDDEN", FORBIDDEN)


def _assert_safe_markdown(seen: dict[str, Any]) -> None:
    assert {"h2", "strong", "em", "code", "ul", "li", "table", "td", "pre", "a"} <= set(
        seen["tags"]
    ), seen["tags"]
    assert seen["on"] == [] and seen["forbidden"] == 0 and seen["pwned"] is None, seen
    hrefs = [href for href, _rel, _target in seen["links"]]
    # An image is not loaded: it becomes a link (http(s) only, like every link).
    web = ["https://example.com/docs", "http://www.example.org", "http://127.0.0.1:9/x.png"]
    assert hrefs == web, seen["links"]
    for _href, rel, target in seen["links"]:
        assert "noopener" in rel and "noreferrer" in rel and target == "_blank"
    for raw in ('<div onclick="window.__pwned=7">', "<script>", "<img src=x", "raw link</a>"):
        assert raw in seen["text"], raw  # raw HTML is shown as the text it is
    assert "javascript:" not in " ".join(h or "" for h in hrefs)


async def test_markdown_replies_render_safely_with_copy_buttons(
    page: Any, luna_web: LunaWebProcess, fake_llm: FakeLLMServer
) -> None:
    await page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=luna_web.url)
    await log_in(page, luna_web.url)
    await new_session(page)
    fake_llm.script(Reply(content=MARKDOWN_REPLY, chunk_size=40, chunk_delay=0.01))
    await send(page, "**not bold** <i>me</i>")
    await page.wait_for_selector("#messages .turn.finished")
    reply = "#messages .msg.assistant:last-of-type .text"
    _assert_safe_markdown(await page.evaluate(INSPECT, reply))
    user = page.locator("#messages .msg.user").last
    assert await user.locator("strong, i, em").count() == 0
    assert await user.text_content() == "**not bold** <i>me</i>"
    await shot(page, "15-markdown-reply")
    copy = page.locator("#messages .code-block button.copy").last
    await copy.click()
    await page.wait_for_selector("#messages .code-block button.copy:has-text('Copied')")
    assert await page.evaluate("navigator.clipboard.readText()") == 'print("<b>hi</b>")'
    await page.reload()  # the history renders the same way
    await page.wait_for_selector("#messages .msg.assistant table")
    _assert_safe_markdown(await page.evaluate(INSPECT, "#messages .msg.assistant .text"))


async def test_bidirectional_controls_show_as_visible_marks(
    page: Any, luna_web: LunaWebProcess, fake_llm: FakeLLMServer
) -> None:
    (luna_web.workspace / "bidi.txt").write_text("report\u202etxt.exe")
    await log_in(page, luna_web.url)
    await new_session(page)
    fake_llm.script(
        Reply(tool_calls=[{"name": "read_file", "arguments": {"path": "bidi.txt"}}]),
        Reply(content="Open invoice\u202egnp.exe, not \u2067this\u2069."),
    )
    await send(page, "read bidi.txt")
    await page.wait_for_selector("#messages .turn.finished")
    marks = page.locator("#messages .msg.assistant .bidi")
    assert await marks.all_text_contents() == ["U+202E", "U+2067", "U+2069"]
    tool = page.locator("#messages details.tool", has_text="read_file")
    await tool.locator("summary").click()
    assert await tool.locator(".tool-result .bidi").all_text_contents() == ["U+202E"]
    async with api(luna_web) as client:
        await client.post("/api/memory", json={"text": "pay to \u202e1234 5678"})
    await page.click("#tabs button[data-view=memory]")
    await page.click("#memory-list-all")
    await page.wait_for_selector("#memory-results .bidi")
    shown = await page.evaluate("document.querySelector('#app').textContent")
    raw = [f"U+{ord(c):04X}" for c in shown if ord(c) in BIDI_CONTROLS]
    assert raw == [], raw
    await shot(page, "16-bidi-visible")


def _fill(luna_web: LunaWebProcess, session: str, n: int) -> None:
    from luna.memory.storage import session_log
    from luna.memory.storage.store import Store

    store = Store(luna_web.db_path)
    try:
        for i in range(n):
            role = "user" if i % 2 == 0 else "assistant"
            session_log.append_message(store, session, {"role": role, "content": f"line {i}"})
        # Filler needs no vectors: keep Luna's embedding worker from spending minutes on it.
        with store.transaction() as conn:
            conn.execute("UPDATE docs SET embedded = 1 WHERE thread = ?", (session,))
    finally:
        store.close()


async def test_ten_thousand_message_session_in_the_page(
    page: Any, luna_web: LunaWebProcess
) -> None:
    await asyncio.to_thread(_fill, luna_web, "web-huge", 10_000)
    await log_in(page, luna_web.url)
    started = time.perf_counter()
    await page.click("#session-list li[data-id='web-huge']")
    await page.wait_for_selector("#messages .msg:has-text('line 9999')")
    shown_ms = (time.perf_counter() - started) * 1000
    assert await page.locator("#messages .msg").count() == 100
    await page.click("#messages .load-older")
    await page.wait_for_function("() => document.querySelectorAll('#messages .msg').length === 200")
    assert "line 9800" in await page.text_content("#messages")
    await shot(page, "12-ten-thousand-messages")
    print(f"\n10,000-message session: last 100 shown in the page in {shown_ms:.0f} ms")
    assert shown_ms < 5000


async def test_the_session_list_is_reached_and_opened_with_the_keyboard(
    page: Any, luna_web: LunaWebProcess
) -> None:
    for name in ("web-keys-a", "web-keys-b"):
        await asyncio.to_thread(_fill, luna_web, name, 2)
    await log_in(page, luna_web.url)
    await page.wait_for_selector("#session-list li[data-id='web-keys-a'] button.session")
    await page.focus("#new-session")
    in_list = "document.activeElement?.closest('#session-list li')?.dataset.id || ''"
    for _ in range(50):  # Tab from "+ New session" through the list to the session wanted
        await page.keyboard.press("Tab")
        if await page.evaluate(in_list) == "web-keys-a":
            break
    else:
        raise AssertionError("Tab never reached the session in the list")
    assert await page.evaluate("document.activeElement.tagName") == "BUTTON"
    await page.keyboard.press("Enter")
    await page.wait_for_selector("#messages .msg:has-text('line 1')")
    assert "web-keys-a" in (await page.text_content("#session-title") or "")
    chosen = page.locator("#session-list li[data-id='web-keys-a'] button.session")
    assert await chosen.get_attribute("aria-current") == "true"
    other = page.locator("#session-list li[data-id='web-keys-b'] button.session")
    assert await other.get_attribute("aria-current") == "false"
    await shot(page, "17-session-list-keyboard")


class _EvilSite(BaseHTTPRequestHandler):
    target = ""

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # http.server API
        t = self.target
        body = f"""<!doctype html><html><body>
<form id=a method=POST action="{t}/api/memory?token={TOKEN}" enctype="text/plain" target=f1>
<input name='{{"text": "planted-with-token", "x": "' value='"}}'></form>
<form id=b method=POST action="{t}/api/memory" enctype="text/plain" target=f2>
<input name='{{"text": "planted-with-cookie", "x": "' value='"}}'></form>
<iframe name=f1></iframe><iframe name=f2></iframe>
<script>
document.getElementById('a').submit(); document.getElementById('b').submit();
fetch("{t}/api/memory", {{method: "POST", credentials: "include", mode: "no-cors",
  headers: {{"Content-Type": "text/plain"}}, body: '{{"text": "planted-with-fetch"}}'}});
fetch("{t}/api/memory?access_token={TOKEN}", {{method: "POST", mode: "no-cors",
  body: '{{"text": "planted-fetch-token"}}'}});
</script></body></html>""".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


async def test_a_cross_site_page_cannot_act_with_the_token_or_the_cookie(
    page: Any, luna_web: LunaWebProcess
) -> None:
    await log_in(page, luna_web.url)  # the victim is logged in: the cookie exists
    handler = type("Evil", (_EvilSite,), {"target": luna_web.url})
    evil = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=evil.serve_forever, daemon=True).start()
    try:
        # "localhost" is another site than "127.0.0.1" for the browser.
        await page.goto(f"http://localhost:{evil.server_address[1]}/")
        await page.wait_for_timeout(1500)
        # The evil page's own console shows the defenses (failed fetches, framing refused by
        # frame-ancestors 'none'); they are its errors, not the page's.
        page.errors.clear()
    finally:
        evil.shutdown()
        evil.server_close()
    async with api(luna_web) as client:
        texts = [m["text"] for m in (await client.get("/api/memory")).json()["memories"]]
    assert not [t for t in texts if "planted" in t], texts


class _OtherPort(BaseHTTPRequestHandler):
    """Another server on the same host name, on another port: it keeps the cookies the browser
    sends it (cookies are not port-scoped) and its page tries Luna's API with them."""

    target = ""
    cookies: list[str] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # http.server API
        self.cookies.append(self.headers.get("Cookie") or "")
        t = self.target
        body = f"""<!doctype html><html><body><script>
(async () => {{
  const out = [];
  for (const path of ["/api/me", "/api/sessions"]) {{
    try {{ const r = await fetch("{t}" + path, {{credentials: "include"}});
           out.push(await r.text()); }} catch (e) {{ out.push("blocked"); }}
  }}
  for (const mode of ["no-cors", "cors"]) {{
    const body = '{{"text": "planted-' + mode + '"}}';
    try {{ await fetch("{t}/api/memory", {{method: "POST", credentials: "include", mode,
             headers: {{"Content-Type": "text/plain"}}, body}}); }} catch (e) {{}}
  }}
  window.__stolen = [localStorage.getItem("luna.csrf"), out];
  document.title = "done";
}})();
</script></body></html>""".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


async def test_a_page_on_another_port_gets_nothing_from_the_cookie_it_receives(
    page: Any, luna_web: LunaWebProcess
) -> None:
    """Issue 23's attack in the browser: chromium hands Luna's cookie to a server on another
    port of the same host; neither that server's page nor a script replaying the cookie can
    read or change anything."""
    async with api(luna_web) as owner:
        task = (await owner.post("/api/schedules", json={"text": "stay", "after": "2h"})).json()
    await log_in(page, luna_web.url)
    handler = type("Other", (_OtherPort,), {"target": luna_web.url, "cookies": []})
    other = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        await page.goto(f"http://127.0.0.1:{other.server_address[1]}/")
        await page.wait_for_function("document.title === 'done'")
        csrf_seen, answers = await page.evaluate("window.__stolen")
        page.errors.clear()  # the other page's failed fetches are its errors, not Luna's
    finally:
        other.shutdown()
        other.server_close()
    stolen = next(c for c in handler.cookies if "luna_login=" in c)  # it did get the cookie
    got_through = 0
    thief = httpx.AsyncClient(base_url=luna_web.url, headers={"Cookie": stolen}, timeout=120)
    async with thief:
        me = await thief.get("/api/me")
        csrf = me.json().get("csrf") if me.status_code == 200 else None
        headers = {"X-CSRF-Token": csrf} if csrf else {}
        for method, path, body in (
            ("GET", "/api/sessions", None),
            ("GET", "/api/memory", None),
            ("POST", "/api/memory", {"text": "planted-by-script"}),
            ("POST", f"/api/schedules/{task['id']}/cancel", None),
        ):
            resp = await thief.request(method, path, json=body, headers=headers)
            got_through += resp.status_code < 400
    print(f"\nstolen cookie replayed: csrf handed out {csrf is not None}, {got_through}/4 got in")
    assert csrf_seen is None and all(a == "blocked" for a in answers), answers
    assert me.status_code >= 400 and got_through == 0
    async with api(luna_web) as owner:
        texts = [m["text"] for m in (await owner.get("/api/memory")).json()["memories"]]
        assert not [t for t in texts if "planted" in t], texts
        assert (await owner.get(f"/api/schedules/{task['id']}")).json()["state"] == "active"


async def test_schedule_a_reminder_run_it_now_and_see_it_in_the_chat(
    page: Any, luna_web: LunaWebProcess
) -> None:
    await log_in(page, luna_web.url)
    await new_session(page)
    await page.click("#tabs button[data-view=schedules]")
    await page.select_option("#schedule-kind", "reminder")
    await page.fill("#schedule-text", "stretch your legs")
    await page.select_option("#schedule-when-kind", "after")
    await page.fill("#schedule-when", "20m")
    await page.click("#schedule-add button[type=submit]")
    await page.wait_for_selector("#schedule-status:has-text('scheduled #')")
    row = page.locator("#schedule-list tr", has_text="stretch your legs")
    await row.wait_for()
    await shot(page, "13-schedules")
    await row.locator("button.run").click()
    await page.click("#tabs button[data-view=chat]")
    await page.wait_for_selector("#messages .msg.delivery:has-text('stretch your legs')")
    await shot(page, "14-reminder-delivered")


async def test_skills_are_listed_and_shown_with_their_body_as_safe_markdown(
    page: Any, luna_web: LunaWebProcess
) -> None:
    folder = luna_web.folder / "data" / "skills" / "garden-care"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(
        "---\nname: garden-care\ndescription: Waters the garden. Use when it is dry.\n"
        f"---\n# Watering\n\n1. Check the soil.\n2. Water at dawn.\n\n{XSS}\n"
    )
    broken = luna_web.folder / "data" / "skills" / "broken"
    broken.mkdir(exist_ok=True)
    (broken / "SKILL.md").write_text("---\nname: other\n---\n")
    await log_in(page, luna_web.url)
    await page.click("#tabs button[data-view=skills]")
    row = page.locator("#skill-list tr", has_text="garden-care")
    await row.wait_for()
    assert "installed" in await row.text_content()
    assert await page.locator("#skill-list tr", has_text="writing-skills").count() == 1
    await page.wait_for_selector("#skill-left-out:has-text('must match skill name')")
    await row.click()
    await page.wait_for_selector("#skill-detail h1:has-text('Watering')")  # Markdown
    assert await page.locator("#skill-detail li").count() == 2
    assert await page.evaluate("window.__pwned === undefined")
    assert XSS in await page.text_content("#skill-detail")  # raw HTML shown as text
    await shot(page, "15-skills")
    async with api(luna_web) as client:
        missing = await client.get("/api/skills/no-such-skill")
        assert missing.status_code == 404 and "no skill" in missing.json()["error"]
