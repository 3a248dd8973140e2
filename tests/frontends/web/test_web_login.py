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
