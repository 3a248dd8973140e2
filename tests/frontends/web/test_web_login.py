"""Logins over real HTTP, as an attacker on the LAN tries them: a stolen cookie, requests
without a browser's origin headers, HTTPS behind a proxy, bursts of wrong tokens and
attempts to lock the owner out."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx

from luna.frontends.web.throttle import MAX_FAILURES
from tests.frontends.web.conftest import TOKEN


def same_origin(luna: Any) -> dict[str, str]:
    """What a browser adds to the page's own fetches."""
    return {"Origin": luna.url, "Sec-Fetch-Site": "same-origin"}


async def log_in(client: httpx.AsyncClient, luna: Any, **headers: str) -> tuple[str, str]:
    """(cookie header value, csrf token) of a fresh login made as the page makes it."""
    resp = await client.post(
        "/login", json={"token": TOKEN}, headers={**same_origin(luna), **headers}
    )
    assert resp.status_code == 200, resp.text
    name, _, rest = resp.headers["set-cookie"].partition("=")
    return f"{name}={rest.split(';')[0]}", resp.json()["csrf"]


async def test_login_csrf_token_is_never_handed_out_for_the_cookie_alone(
    web_luna: Callable[..., Any],
) -> None:
    luna = await web_luna()
    async with luna.client(token=None) as browser:
        cookie, csrf = await log_in(browser, luna)
    async with luna.client(token=None, headers={"Cookie": cookie}) as thief:
        for path in ("/api/me", "/api/sessions", "/api/memory", "/api/config", "/api/events"):
            resp = await thief.get(path)
            assert resp.status_code == 403, (path, resp.status_code)
            assert csrf not in resp.text, path
        me = await thief.get("/api/me", headers={"X-CSRF-Token": csrf})
        assert me.status_code == 200 and me.json()["auth"] == "cookie"
        assert csrf not in me.text


async def test_state_changes_with_the_cookie_need_the_browsers_origin_headers(
    web_luna: Callable[..., Any],
) -> None:
    luna = await web_luna()
    async with luna.client(token=None) as browser:
        cookie, csrf = await log_in(browser, luna)
    other_port = luna.url.rsplit(":", 1)[0] + ":1"
    refused = [
        {},  # a script: neither header
        {"Sec-Fetch-Site": "same-site"},  # a page on another port of this host
        {"Sec-Fetch-Site": "none"},
        {"Origin": other_port},
        {"Origin": "null"},
    ]
    async with luna.client(token=None, headers={"Cookie": cookie, "X-CSRF-Token": csrf}) as c:
        for headers in refused:
            resp = await c.post("/api/memory", json={"text": "planted"}, headers=headers)
            assert resp.status_code == 403, headers
            assert (await c.post("/api/logout", headers=headers)).status_code == 403, headers
        for i, headers in enumerate(({"Origin": luna.url}, {"Sec-Fetch-Site": "same-origin"})):
            resp = await c.post("/api/memory", json={"text": f"mine {i}"}, headers=headers)
            assert resp.status_code == 201, (headers, resp.text)
    texts = [m["text"] for m in await luna.memory.list_memories(limit=50)]
    assert sorted(texts) == ["mine 0", "mine 1"]


async def test_a_stolen_cookie_alone_writes_nothing_and_cancels_nothing(
    web_luna: Callable[..., Any],
) -> None:
    """The attack of issue 23: the cookie, read by a server on another port, replayed by a
    script; it fetches the CSRF token from /api/me, then writes without origin headers."""
    luna = await web_luna(scheduler=True)
    async with luna.client() as owner:
        task = (await owner.post("/api/schedules", json={"text": "water", "after": "1h"})).json()
    async with luna.client(token=None) as browser:
        cookie, _csrf = await log_in(browser, luna)
    got_through = 0
    async with luna.client(token=None, headers={"Cookie": cookie}) as thief:
        me = await thief.get("/api/me")
        stolen = me.json().get("csrf") if me.status_code == 200 else None
        headers = {"X-CSRF-Token": stolen} if stolen else {}
        for method, path, body in (
            ("POST", "/api/memory", {"text": "planted"}),
            ("POST", f"/api/schedules/{task['id']}/cancel", None),
            ("POST", "/api/sessions/web-x/messages", {"text": "hi"}),
            ("GET", "/api/sessions", None),
        ):
            resp = await thief.request(method, path, json=body, headers=headers)
            got_through += resp.status_code < 400
    assert got_through == 0
    assert await luna.memory.list_memories(limit=10) == []
    async with luna.client() as owner:
        assert (await owner.get(f"/api/schedules/{task['id']}")).json()["state"] == "active"


async def test_over_https_the_cookie_has_the_host_prefix_and_is_secure(
    web_luna: Callable[..., Any],
) -> None:
    luna = await web_luna({"web": {"trusted_proxies": ["127.0.0.1", "::1"]}})
    tls = {"X-Forwarded-Proto": "https"}
    async with luna.client(token=None) as browser:
        resp = await browser.post(
            "/login", json={"token": TOKEN}, headers={**same_origin(luna), **tls}
        )
        set_cookie = resp.headers["set-cookie"]
        assert set_cookie.startswith("__Host-luna_login="), set_cookie
        assert "Secure" in set_cookie and "Path=/" in set_cookie
        assert "domain" not in set_cookie.lower()
        login_id = set_cookie.split(";")[0].split("=", 1)[1]
        csrf = resp.json()["csrf"]
        ok = await browser.get(
            "/api/me",
            headers={"Cookie": f"__Host-luna_login={login_id}", "X-CSRF-Token": csrf, **tls},
        )
        assert ok.status_code == 200
        # Over HTTPS a cookie without the prefix (one that plain HTTP could have set) counts
        # for nothing; over plain HTTP the prefixed one is not expected either.
        browser.cookies.clear()
        for name, headers in (("luna_login", tls), ("__Host-luna_login", {})):
            resp = await browser.get(
                "/api/me",
                headers={"Cookie": f"{name}={login_id}", "X-CSRF-Token": csrf, **headers},
            )
            assert resp.status_code == 401, name
        plain = await browser.post("/login", json={"token": TOKEN}, headers=same_origin(luna))
        assert plain.headers["set-cookie"].startswith("luna_login=")
        assert "Secure" not in plain.headers["set-cookie"]


async def test_forwarded_headers_count_only_from_a_trusted_proxy(
    web_luna: Callable[..., Any],
) -> None:
    luna = await web_luna()  # no trusted proxy: 127.0.0.1 is just a client
    async with luna.client(token=None) as browser:
        resp = await browser.post(
            "/login",
            json={"token": TOKEN},
            headers={**same_origin(luna), "X-Forwarded-Proto": "https"},
        )
        assert resp.headers["set-cookie"].startswith("luna_login=")
    async with luna.client(token="w" * 40) as wrong:
        guesses = (  # a new "client address" for every guess
            wrong.get("/api/me", headers={"X-Forwarded-For": f"10.9.0.{i}"})
            for i in range(MAX_FAILURES)
        )
        assert {r.status_code for r in await asyncio.gather(*guesses)} == {401}
        late = await wrong.get("/api/me", headers={"X-Forwarded-For": "10.9.1.1"})
        assert late.status_code == 429
    events = "".join(p.read_text() for p in luna.cfg.observe.log_dir.glob("*.jsonl"))
    assert events.count('"event": "web_untrusted_proxy"') == 1  # said once, not per request


async def test_sixty_concurrent_wrong_tokens_are_not_all_judged(
    web_luna: Callable[..., Any],
) -> None:
    """Sixty guesses in one burst, each body arriving just after its headers (as over a real
    network): at most the limit of them may be compared with the token."""
    luna = await web_luna()

    def late_body(i: int) -> Callable[[], Any]:
        async def body() -> Any:
            await asyncio.sleep(0.2)  # every request's headers are in before any body
            yield b'{"token": "wrong-guess-%02d-xxxxxxxxxxxxxxxx"}' % i

        return body

    headers = {**same_origin(luna), "Content-Type": "application/json"}
    limits = httpx.Limits(max_connections=100)
    async with luna.client(token=None, limits=limits) as anon:
        sent = [anon.post("/login", content=late_body(i)(), headers=headers) for i in range(60)]
        codes = [r.status_code for r in await asyncio.gather(*sent)]
    judged = codes.count(401)
    print(f"\n60 concurrent wrong logins: {judged} judged (401), {codes.count(429)} refused (429)")
    assert set(codes) <= {401, 429}, codes
    assert judged <= MAX_FAILURES + 1, codes


async def test_the_right_token_gets_in_after_twenty_failures_from_its_address(
    web_luna: Callable[..., Any],
) -> None:
    luna = await web_luna()
    async with luna.client(token="y" * 40) as wrong, luna.client() as right:
        codes = await asyncio.gather(*(wrong.get("/api/me") for _ in range(MAX_FAILURES)))
        assert {r.status_code for r in codes} == {401}
        blocked = await wrong.get("/api/me")
        assert blocked.status_code == 429
        wait = float(blocked.headers["Retry-After"])
        assert 0 < wait <= 60 / MAX_FAILURES + 1
        await asyncio.sleep(wait)
        assert (await right.get("/api/me")).status_code == 200
        async with luna.client(token=None) as page:
            login = await page.post("/login", json={"token": TOKEN}, headers=same_origin(luna))
            assert login.status_code == 200, login.text
            assert (await right.get("/api/sessions")).status_code == 200
        assert (await wrong.get("/api/me")).status_code in (401, 429)


async def test_behind_a_trusted_proxy_failures_count_per_client(
    web_luna: Callable[..., Any],
) -> None:
    luna = await web_luna({"web": {"trusted_proxies": ["127.0.0.1/8", "::1"]}})
    attacker = {"X-Forwarded-For": "10.0.0.66"}
    async with luna.client(token="x" * 40) as wrong, luna.client() as right:
        guesses = (wrong.get("/api/me", headers=attacker) for _ in range(MAX_FAILURES))
        assert {r.status_code for r in await asyncio.gather(*guesses)} == {401}
        assert (await wrong.get("/api/me", headers=attacker)).status_code == 429
        # Spoofing a hop in front does not help: the proxy appends the real address.
        spoofed = {"X-Forwarded-For": "203.0.113.9, 10.0.0.66"}
        assert (await wrong.get("/api/me", headers=spoofed)).status_code == 429
        owner = {"X-Forwarded-For": "10.0.0.7"}
        assert (await right.get("/api/me", headers=owner)).status_code == 200
        async with luna.client(token=None) as page:
            login = await page.post(
                "/login", json={"token": TOKEN}, headers={**same_origin(luna), **owner}
            )
            assert login.status_code == 200
