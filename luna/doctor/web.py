"""``luna doctor``'s web checks: where the page listens, the token, the reverse proxy.

Invariants:
- The rules are the ones the web front-end applies: ``WebConfig.is_loopback_only`` and
  :func:`luna.config.secrets.web_token_problem`; a weak token is ✗ when the web is enabled
  (Luna would refuse to start it), a LAN bind without TLS in front is ⚠.
- A proxy that is not trusted is known from the front-end's ``web_untrusted_proxy`` events in
  the log: doctor cannot see requests, the running Luna can.
- No secret is printed, nor any of its characters.
"""

from __future__ import annotations

import datetime as dt
import ipaddress

from luna.config import Config
from luna.config.schema import WebConfig
from luna.config.secrets import HOW_TO_MAKE_WEB_TOKEN, web_token_problem
from luna.doctor.result import CheckResult, fail, in_thread, ok, skipped

PROXY_DAYS = 7


def exposure(web: WebConfig) -> str | None:
    """Why the listener is exposed beyond this machine without TLS in front, or None. The web
    front-end says the same at start."""
    if web.is_loopback_only:
        return None
    where = f"{web.host}:{web.port}"
    if web.trusted_proxies:
        return (
            f"{where} is reachable from the network directly, around the proxy at "
            f"{', '.join(web.trusted_proxies)}: whoever skips it speaks plain HTTP"
        )
    return (
        f"{where} is reachable from the network over plain HTTP (no TLS in front): the token "
        "and your conversations cross it in clear text"
    )


def _bind(web: WebConfig) -> CheckResult:
    problem = exposure(web)
    if problem is None:
        return ok("web bind address", f"{web.host}:{web.port}: this machine only")
    return fail(
        "web bind address",
        problem,
        'set web.host = "127.0.0.1" and put a TLS reverse proxy in front on this machine '
        "(README: On the LAN)",
        essential=False,
    )


def _token(web: WebConfig) -> CheckResult:
    problem = web_token_problem(web.token)
    if problem is None:
        return ok("web token", f"set ({len(web.token)} characters), not blank or patterned")
    return fail("web token", problem, HOW_TO_MAKE_WEB_TOKEN, essential=web.enabled)


def _untrusted_peers(cfg: Config) -> list[str]:
    from luna.observe.stats import events

    now = dt.datetime.now(dt.UTC)
    peers: list[str] = []
    for _ts, ev in events(cfg.observe.log_dir, now - dt.timedelta(days=PROXY_DAYS), now):
        peer = str(ev.get("peer") or "?")
        if ev.get("event") == "web_untrusted_proxy" and peer not in peers:
            peers.append(peer)
    return peers


def _proxy(web: WebConfig, untrusted: list[str]) -> CheckResult:
    name = "web proxy"
    if untrusted:
        listed = ", ".join(f'"{p}"' for p in [*web.trusted_proxies, *untrusted])
        return fail(
            name,
            f"requests came through a proxy at {', '.join(untrusted)} that web.trusted_proxies "
            f"does not list (last {PROXY_DAYS} days): all its clients count as one source for "
            "the login throttle, and the login cookie is not marked Secure",
            f"luna config set web.trusted_proxies '[{listed}]'",
            essential=False,
        )
    broad = [
        n
        for n in web.trusted_proxies
        if not (ipaddress.ip_network(n).is_loopback or ipaddress.ip_network(n).is_private)
        or ipaddress.ip_network(n).prefixlen == 0
    ]
    if broad:
        return fail(
            name,
            f"web.trusted_proxies lists {', '.join(broad)}: anyone there can claim any client "
            "address and HTTPS",
            "list only the address of your reverse proxy (e.g. 127.0.0.1 on this machine)",
            essential=False,
        )
    if web.trusted_proxies:
        return ok(name, f"X-Forwarded-For/-Proto believed from {', '.join(web.trusted_proxies)}")
    return ok(name, "none trusted: forwarded headers are ignored (no proxy seen in the log)")


async def check_web(cfg: Config) -> list[CheckResult]:
    web = cfg.web
    if not web.enabled and not web.token:
        return [skipped("web", "web.enabled = false and LUNA_WEB_TOKEN is not set")]
    untrusted = await in_thread(_untrusted_peers, cfg)
    return [_bind(web), _token(web), _proxy(web, untrusted)]
