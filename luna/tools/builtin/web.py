"""Web tools: ``web_fetch`` (a page as markdown) and ``web_search`` (structured results).

Invariants (web_fetch):
- Only http and https. Redirects are followed by hand (at most ``MAX_REDIRECTS``), and every
  hop is checked again.
- Before each request the host is resolved; if any address is not globally routable (loopback,
  private, link-local including cloud metadata, CGNAT, multicast, reserved, unspecified, or
  an IPv4-mapped, IPv4-compatible, 6to4 or NAT64 form of those) the fetch is refused, unless
  the host is in ``tools.fetch_allow_hosts``. The connection goes to the checked address (the
  URL's host is kept for the Host header and TLS SNI), so a second DNS answer cannot slip past
  the check.
- Bodies are read in chunks and cut at ``tools.fetch_max_bytes``; the whole fetch is bounded by
  ``tools.fetch_timeout``. HTML becomes markdown with html2text (in a thread).
- Proxy variables from the environment are ignored (``trust_env=False``).
web_search uses ``tools.search_url`` when set (``GET {url}?q=...`` answering a JSON list of
``{title, url, snippet}``), otherwise the ddgs library; failures become one clear ToolError.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

import html2text
import httpx

from luna.config import Config
from luna.errors import ToolError
from luna.tools.registry import ToolRegistry

MAX_REDIRECTS = 5
USER_AGENT = "Luna/0.1 (+self-hosted assistant)"
TEXT_TYPES = (
    "text/",
    "application/json",
    "application/xml",
    "application/xhtml",
    "+xml",
    "+json",
    "application/javascript",
)


NAT64 = ipaddress.ip_network("64:ff9b::/96")
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")


def is_public(addr: str) -> bool:
    """True only for globally routable unicast; IPv6 forms embedding IPv4 are judged by it."""
    ip = ipaddress.ip_address(addr.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour
        if embedded is None and (ip in NAT64 or ip in IPV4_COMPATIBLE):
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is not None:
            ip = embedded
    return ip.is_global and not ip.is_multicast


def host_allowed(host: str, port: int | None, allow: list[str]) -> bool:
    host = host.lower().rstrip(".")
    names = {a.lower().rstrip(".") for a in allow}
    return host in names or (port is not None and f"{host}:{port}" in names)


async def resolve_checked(host: str, port: int, *, allowed: bool, limit: float) -> str:
    """One address to connect to; ToolError when the host resolves to a non-public address."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(limit):
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, TimeoutError) as e:
        raise ToolError(f"cannot resolve {host}: {e}") from e
    addrs = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not addrs:
        raise ToolError(f"cannot resolve {host}")
    if not allowed:
        bad = [a for a in addrs if not is_public(a)]
        if bad:
            raise ToolError(
                f"refused: {host} resolves to a non-public address ({bad[0]}); local, private "
                "and metadata addresses are blocked unless listed in tools.fetch_allow_hosts"
            )
    return addrs[0]


def html_to_markdown(html: str, base_url: str) -> str:
    conv = html2text.HTML2Text(baseurl=base_url)
    conv.body_width = 0
    conv.ignore_images = True
    return conv.handle(html)


async def fetch(cfg: Config, url: str, max_bytes: int | None = None) -> tuple[str, str]:
    """(final url, text) of a page, with the SSRF checks described in the module docstring."""
    try:
        return await _fetch(cfg, url, max_bytes)
    except TimeoutError as e:
        raise ToolError(
            f"fetching {url} took longer than {cfg.tools.fetch_timeout:g} s (tools.fetch_timeout)"
        ) from e


@dataclass(frozen=True)
class Fetched:
    """What one checked GET gave, after its redirects: the body read up to the cap."""

    url: str  # the final URL
    status: int
    content_type: str  # lower-cased, parameters kept
    encoding: str
    body: bytes
    is_truncated: bool  # the body went on past the cap


async def fetch_bytes(cfg: Config, url: str, cap: int) -> Fetched:
    """GET ``url`` with every SSRF check of the module docstring (each redirect hop checked
    again, the connection pinned to the checked address), the body cut at ``cap`` bytes, the
    whole bounded by ``tools.fetch_timeout`` (TimeoutError past it). ToolError when refused
    or failed. The one guarded fetch: ``web_fetch`` and image URLs sent to Luna both use it."""
    timeout = cfg.tools.fetch_timeout
    async with (
        asyncio.timeout(timeout),
        httpx.AsyncClient(trust_env=False, timeout=timeout, follow_redirects=False) as client,
    ):
        for _hop in range(MAX_REDIRECTS + 1):
            try:
                u = httpx.URL(url)
            except httpx.InvalidURL as e:
                raise ToolError(f"invalid URL {url!r}: {e}") from e
            if u.scheme not in ("http", "https") or not u.host:
                raise ToolError(f"only http and https URLs can be fetched, not {url!r}")
            port = u.port or (443 if u.scheme == "https" else 80)
            allowed = host_allowed(u.host, u.port, cfg.tools.fetch_allow_hosts)
            addr = await resolve_checked(u.host, port, allowed=allowed, limit=timeout)
            pinned = u.copy_with(host=addr)
            host_header = u.host if u.port is None else f"{u.host}:{u.port}"
            if ":" in u.host and u.port is None:
                host_header = f"[{u.host}]"
            ext = {"sni_hostname": u.host} if u.scheme == "https" else {}
            headers = {"Host": host_header, "User-Agent": USER_AGENT, "Accept": "*/*"}
            try:
                async with client.stream("GET", pinned, headers=headers, extensions=ext) as resp:
                    if resp.is_redirect and resp.headers.get("location"):
                        url = urljoin(url, resp.headers["location"])
                        continue
                    body, truncated = await _read_capped(resp, cap)
                    return Fetched(
                        url,
                        resp.status_code,
                        resp.headers.get("content-type", "").lower(),
                        resp.encoding or "utf-8",
                        body,
                        truncated,
                    )
            except httpx.HTTPError as e:
                raise ToolError(f"could not fetch {url}: {type(e).__name__} {e}") from e
    raise ToolError(f"too many redirects (more than {MAX_REDIRECTS}) starting at the given URL")


async def _fetch(cfg: Config, url: str, max_bytes: int | None) -> tuple[str, str]:
    cap = min(max_bytes or cfg.tools.fetch_max_bytes, cfg.tools.fetch_max_bytes)
    got = await fetch_bytes(cfg, url, cap)
    url, ctype, status = got.url, got.content_type, got.status
    text = got.body.decode(got.encoding, "replace")
    if status >= 400:
        raise ToolError(f"{url} answered HTTP {status}: {text[:300]}")
    if ctype and not any(t in ctype for t in TEXT_TYPES):
        raise ToolError(f"{url} is {ctype.split(';')[0]}, not text; not fetched")
    if "html" in ctype or (not ctype and "<html" in text[:1000].lower()):
        text = await asyncio.to_thread(html_to_markdown, text, url)
    if got.is_truncated:
        text += f"\n\n[page cut at {cap} bytes]"
    return url, text


async def _read_capped(resp: httpx.Response, cap: int) -> tuple[bytes, bool]:
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.aiter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size >= cap:
            return b"".join(chunks)[:cap], True
    return b"".join(chunks), False


async def search(cfg: Config, query: str, max_results: int) -> list[dict[str, str]]:
    """Structured results: [{title, url, snippet}]."""
    timeout = cfg.tools.fetch_timeout
    if cfg.tools.search_url:
        try:
            async with httpx.AsyncClient(trust_env=False, timeout=timeout) as client:
                resp = await client.get(
                    cfg.tools.search_url, params={"q": query, "max_results": max_results}
                )
                resp.raise_for_status()
                data = resp.json()
        except (httpx.HTTPError, json.JSONDecodeError) as e:
            raise ToolError(
                f"web search failed: the search service at {cfg.tools.search_url} did not "
                f"answer ({type(e).__name__})"
            ) from e
        items = data if isinstance(data, list) else data.get("results", [])
    else:
        items = await _ddgs_search(query, max_results, timeout)
    results = []
    for item in items[:max_results]:
        if isinstance(item, dict):
            results.append(
                {
                    "title": str(item.get("title", "")),
                    "url": str(item.get("url") or item.get("href") or ""),
                    "snippet": str(item.get("snippet") or item.get("body") or ""),
                }
            )
    return results


async def _ddgs_search(query: str, max_results: int, limit: float) -> list[Any]:
    from ddgs import DDGS
    from ddgs.exceptions import DDGSException

    def run() -> list[Any]:
        return list(DDGS(timeout=int(limit)).text(query, max_results=max_results))

    try:
        async with asyncio.timeout(limit + 5):
            return await asyncio.to_thread(run)
    except (DDGSException, OSError, TimeoutError) as e:
        raise ToolError(
            "web search failed: no answer from the search engines (is this machine offline?)"
        ) from e


def register(reg: ToolRegistry, cfg: Config) -> None:
    @reg.tool(level="allow")
    async def web_fetch(url: str, max_bytes: int | None = None) -> str:
        """Fetch a web page (http or https) and return its text as markdown.

        Args:
            url: The full URL to fetch.
            max_bytes: Stop reading after this many bytes (capped by the configuration).
        """
        final, text = await fetch(cfg, url, max_bytes)
        return f"URL: {final}\n\n{text.strip()}"

    @reg.tool(level="allow")
    async def web_search(query: str, max_results: int = 5) -> str:
        """Search the web and return titles, URLs and snippets.

        Args:
            query: What to search for.
            max_results: How many results to return (1-20).
        """
        n = max(1, min(max_results, 20))
        results = await search(cfg, query, n)
        if not results:
            return f"No results for {query!r}."
        lines = []
        for i, r in enumerate(results, 1):
            lines.append(f"{i}. {r['title']}\n   {r['url']}\n   {r['snippet']}")
        return "\n".join(lines)
