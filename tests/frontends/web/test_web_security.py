"""Security of the web front-end over real HTTP: the token, logins and CSRF, cross-site
requests, headers, XSS payloads kept as data, a 10,000-message history, and the refusal to
start without a token (a real ``python -m luna`` process)."""

from __future__ import annotations

import asyncio
import hashlib
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from luna.frontends.web.auth import CSP
from luna.frontends.web.server import STATIC_DIR
from luna.memory.storage import session_log
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.frontends.web.conftest import TOKEN, XSS
from tests.frontends.web.process import LunaWebProcess
from tests.frontends.web.sse import event_stream
from tests.luna_process import data_env

PROTECTED = [
    ("GET", "/api/me"),
    ("GET", "/api/sessions"),
    ("GET", "/api/events"),
    ("GET", "/api/memory"),
    ("GET", "/api/stats"),
    ("GET", "/api/config"),
    ("GET", "/v1/models"),
    ("POST", "/v1/chat/completions"),
    ("POST", "/api/memory"),
]


async def test_nothing_answers_without_the_token(web_luna: Callable[..., Any]) -> None:
    luna = await web_luna()
    async with luna.client(token=None) as anon, luna.client(token="x" * 30) as wrong:
        for method, path in PROTECTED:
            resp = await anon.request(method, path, json={})
            assert resp.status_code == 401, (method, path)
            resp = await wrong.request(method, path, json={})
            assert resp.status_code == 401, (method, path)
            assert resp.json()["error"] == "wrong token"
        # The page's shell and static files hold no data: they load, so the login can show.
        assert (await anon.get("/")).status_code == 200
        assert (await anon.get("/static/app.js")).status_code == 200
        for path in ("/static/../server.py", "/static/%2e%2e/server.py"):
            escaped = await anon.get(path)
            assert escaped.status_code in (401, 403, 404) and "import" not in escaped.text


async def test_token_in_a_cross_site_query_string_is_refused(
    web_luna: Callable[..., Any],
) -> None:
    luna = await web_luna()
    cross_site = {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}
    async with luna.client(token=None, headers=cross_site) as evil:
        for param in ("token", "access_token", "api_key"):
            resp = await evil.post(
                "/api/memory", params={param: TOKEN}, json={"text": "planted by evil"}
            )
            assert resp.status_code == 400 and "never accepted in a URL" in resp.json()["error"]
            assert "access-control-allow-origin" not in resp.headers
        resp = await evil.get("/v1/models", params={"token": TOKEN})
        assert resp.status_code == 400
    # Even with a valid Authorization header, a token in the URL is refused.
    async with luna.client() as owner:
        assert (await owner.get("/api/sessions", params={"token": TOKEN})).status_code == 400
        assert (await owner.get("/api/memory")).json()["memories"] == []


async def login(client: httpx.AsyncClient, page: dict[str, str]) -> str:
    resp = await client.post("/login", json={"token": TOKEN}, headers=page)
    assert resp.status_code == 200, resp.text
    cookie = resp.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    assert TOKEN not in cookie
    return resp.json()["csrf"]


async def test_browser_login_cookie_needs_csrf_and_same_site(web_luna: Callable[..., Any]) -> None:
    luna = await web_luna({"web": {"trusted_proxies": ["127.0.0.1"]}})
    page = {"Origin": luna.url, "Sec-Fetch-Site": "same-origin"}
    async with luna.client(token=None) as browser:
        wrong_token = await browser.post("/login", json={"token": "nope" * 5}, headers=page)
        assert wrong_token.status_code == 401
        form = await browser.post("/login", data={"token": TOKEN}, headers=page)
        assert form.status_code == 415  # what a cross-site form sends
        evil_login = await browser.post(
            "/login", json={"token": TOKEN}, headers={"Origin": "https://evil.example"}
        )
        assert evil_login.status_code == 403
        scripted = await browser.post("/login", json={"token": TOKEN})  # no origin headers
        assert scripted.status_code == 403
        csrf = await login(browser, page)
        me = (await browser.get("/api/me", headers={"X-CSRF-Token": csrf})).json()
        assert me["auth"] == "cookie" and "csrf" not in me
        body = {"text": "a memory"}
        no_csrf = await browser.post("/api/memory", json=body, headers=page)
        assert no_csrf.status_code == 403 and "X-CSRF-Token" in no_csrf.json()["error"]
        wrong = await browser.post(
            "/api/memory", json=body, headers={**page, "X-CSRF-Token": "x" * 43}
        )
        assert wrong.status_code == 403
        cross = await browser.post(
            "/api/memory",
            json=body,
            headers={"X-CSRF-Token": csrf, "Sec-Fetch-Site": "cross-site"},
        )
        assert cross.status_code == 403
        other_origin = await browser.post(
            "/api/memory", json=body, headers={"X-CSRF-Token": csrf, "Origin": "http://evil:1"}
        )
        assert other_origin.status_code == 403
        same = await browser.post("/api/memory", json=body, headers={**page, "X-CSRF-Token": csrf})
        assert same.status_code == 201
        out = await browser.post("/api/logout", headers={**page, "X-CSRF-Token": csrf})
        assert out.status_code == 200
        assert (await browser.get("/api/me", headers={"X-CSRF-Token": csrf})).status_code == 401
        browser.cookies.clear()
        assert (await browser.get("/api/me")).status_code == 401
        plain = await browser.post("/login", json={"token": TOKEN}, headers=page)
        assert "Secure" not in plain.headers["set-cookie"]
        behind_tls = await browser.post(
            "/login", json={"token": TOKEN}, headers={**page, "X-Forwarded-Proto": "https"}
        )
        assert "Secure" in behind_tls.headers["set-cookie"]  # a trusted TLS proxy on this machine


async def test_no_cors_and_strict_headers_everywhere(web_luna: Callable[..., Any]) -> None:
    luna = await web_luna()
    async with luna.client(headers={"Origin": "https://evil.example"}) as client:
        preflight = await client.request(
            "OPTIONS",
            "/v1/chat/completions",
            headers={"Access-Control-Request-Method": "POST"},
        )
        assert preflight.status_code == 403
        for path in ("/", "/static/app.js", "/api/sessions", "/v1/models", "/nope"):
            resp = await client.get(path)
            assert resp.headers["content-security-policy"] == CSP, path
            assert resp.headers["x-content-type-options"] == "nosniff"
            assert resp.headers["x-frame-options"] == "DENY"
            assert not [h for h in resp.headers if h.lower().startswith("access-control-")]
        assert "'unsafe-inline'" not in CSP and "script-src 'self'" in CSP
        async with event_stream(client):
            pass  # the SSE stream carries the headers too (checked on prepare)


def _code(path: Path) -> str:
    return re.sub(r"^\s*//.*$", "", path.read_text(), flags=re.M)  # comments may name them


def test_the_page_never_writes_markup_from_strings() -> None:
    """The escaping rule's owners: dom.js builds nodes from text, markdown.js is the one way to
    a sanitized fragment; no HTML sink anywhere in the page's own code."""
    sinks = re.compile(
        r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|Function\(|srcdoc"
        r"|DOMParser|createContextualFragment|setHTML|parseHTML"
    )
    libraries = re.compile(r"DOMPurify|\bmarked\b|Marked|\.sanitize\(")
    for path in STATIC_DIR.glob("*.js"):
        code = _code(path)
        assert not sinks.search(code), path.name
        if path.name != "markdown.js":
            assert not libraries.search(code), f"{path.name} reaches the Markdown path directly"
    markdown = _code(STATIC_DIR / "markdown.js")
    assert markdown.count("DOMPurify.sanitize(") == 1 and markdown.count("marked.parse(") == 1
    assert (
        "RETURN_DOM_FRAGMENT: true" in markdown
        and "html: ({ text }) => escapeHtml(text)" in markdown
    )
    assert re.search(r"ALLOWED_URI_REGEXP: WEB_URL", markdown)
    assert "const WEB_URL = /^https?:\\/\\//i;" in markdown
    html = (STATIC_DIR / "index.html").read_text()
    assert not re.search(r"<script(?![^>]*\bsrc=)", html)  # no inline script (CSP forbids it)
    assert not re.search(r"\son[a-z]+\s*=", html) and " style=" not in html


def test_vendored_libraries_are_the_recorded_npm_files_with_their_licenses() -> None:
    vendor = STATIC_DIR / "vendor"
    folders = sorted(p for p in vendor.iterdir() if p.is_dir())
    assert [f.name for f in folders] == ["chart.js", "dompurify", "marked"]
    for folder in folders:
        note = (folder / "VENDOR.md").read_text()
        recorded = dict(re.findall(r"sha256 of (\S+): ([0-9a-f]{64})", note))
        assert recorded, folder.name
        for name, digest in recorded.items():
            assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name
        assert list(folder.glob("LICENSE*")), f"{folder.name} has no license file"


async def test_xss_payloads_stay_data_in_every_api(
    web_luna: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    luna = await web_luna()
    llm_server.script(
        Reply(tool_calls=[{"name": "html_page", "arguments": {}}]),
        Reply(content=f"Here you go: {XSS}"),
    )
    async with luna.client() as client, event_stream(client) as events:
        resp = await client.post("/api/sessions/web-xss/messages", json={"text": "fetch it"})
        turn = resp.json()["turn_id"]
        done = await events.wait_for(lambda e: e.get("turn_id") == turn and e["type"] == "done")
        assert XSS in done["reply"]
        tool = next(e for e in events.of(turn) if e["type"] == "tool_finished")
        assert XSS in tool["preview"]
        await client.post("/api/memory", json={"text": f"remember {XSS}"})
        for path in ("/api/sessions/web-xss/messages", "/api/memory", "/api/sessions"):
            resp = await client.get(path)
            assert resp.headers["content-type"].startswith("application/json"), path
        history = (await client.get("/api/sessions/web-xss/messages")).json()["messages"]
        assert any(XSS in m["content"] for m in history if m["role"] == "tool")


def _fill(memory: Any, session: str, n: int) -> None:
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        session_log.append_message(memory.store, session, {"role": role, "content": f"m{i}"})


@pytest.mark.slow  # 27 s on the shared 2-core box (2026-12-05)
async def test_ten_thousand_message_history_pages_quickly(
    web_luna: Callable[..., Any],
) -> None:
    luna = await web_luna()
    await asyncio.to_thread(_fill, luna.memory, "web-big", 10_000)
    async with luna.client() as client:
        started = time.perf_counter()
        first = (await client.get("/api/sessions/web-big/messages")).json()
        first_ms = (time.perf_counter() - started) * 1000
        assert len(first["messages"]) == 100 and first["has_more"]
        assert first["messages"][-1]["content"] == "m9999"
        seen = [m["id"] for m in first["messages"]]
        page, pages = first, 1
        while page["has_more"]:
            oldest = page["messages"][0]["id"]
            page = (
                await client.get(
                    "/api/sessions/web-big/messages", params={"before": oldest, "limit": 500}
                )
            ).json()
            seen = [m["id"] for m in page["messages"]] + seen
            pages += 1
        assert len(seen) == len(set(seen)) == 10_000 and seen == sorted(seen)
        started = time.perf_counter()
        listed = (await client.get("/api/sessions")).json()["sessions"]
        list_ms = (time.perf_counter() - started) * 1000
        assert listed[0]["messages"] == 10_000
        # A turn on it (the client resends only the tail: compared with the log's tail, not
        # all of it) runs in the background; the front-end keeps answering meanwhile.
        chat = asyncio.create_task(
            client.post(
                "/v1/chat/completions",
                headers={"X-Luna-Session": "web-big"},
                json={
                    "model": "luna",
                    "messages": [
                        {"role": "user", "content": "m9998"},
                        {"role": "assistant", "content": "m9999"},
                        {"role": "user", "content": "and now?"},
                    ],
                },
                timeout=300,
            )
        )
        during: list[float] = []
        while not chat.done() and len(during) < 50:
            started = time.perf_counter()
            resp = await client.get("/api/sessions/web-big/messages", params={"limit": 50})
            during.append((time.perf_counter() - started) * 1000)
            assert resp.status_code == 200
            await asyncio.sleep(0.1)
        answer = await chat
        assert answer.headers["x-luna-history"] == "continued"
    worst = max(during) if during else 0.0
    print(
        f"\n10,000-message history: first page {first_ms:.0f} ms, {pages} pages, "
        f"session list {list_ms:.0f} ms; a turn on it answered {answer.status_code}, "
        f"history pages meanwhile: worst {worst:.0f} ms over {len(during)}"
    )
    assert first_ms < 2000 and list_ms < 2000 and worst < 1000


def test_luna_web_refuses_to_start_without_a_token(tmp_path: Path) -> None:
    (tmp_path / "mcp_servers.json").write_text('{"servers": {}}')
    env = data_env(tmp_path, "http://127.0.0.1:9/v1")
    proc = subprocess.run(
        [sys.executable, "-m", "luna", "web", "--no-embedded"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("luna: web: LUNA_WEB_TOKEN is not set")
    assert "secrets.token_urlsafe" in lines[0] and "Traceback" not in proc.stderr


def test_luna_web_on_the_lan_without_tls_warns_at_start(tmp_path: Path) -> None:
    with FakeLLMServer() as llm:
        proc = LunaWebProcess(tmp_path, llm.url, 'host = "0.0.0.0"\n').start()
        assert proc.stop() == 0, "".join(proc.stderr)
    warned = [line for line in proc.stderr if "plain HTTP" in line]
    assert len(warned) == 1, proc.stderr
    assert "0.0.0.0" in warned[0] and "TLS" in warned[0] and "127.0.0.1" in warned[0]
    assert "Traceback" not in "".join(proc.stderr)
    # (On 127.0.0.1 it says nothing: see test_no_request_body_puts_a_traceback_on_stderr.)
