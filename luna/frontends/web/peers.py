"""Who is asking: the client's address and whether its connection is HTTPS, believing a reverse
proxy's forwarded headers only from the proxies listed in ``web.trusted_proxies``.

Invariants:
- ``X-Forwarded-For`` and ``X-Forwarded-Proto`` count only when the TCP peer is a trusted
  proxy. The client is then the right-most address of ``X-Forwarded-For`` that is not itself a
  trusted proxy: what the proxy appended, never what the client wrote in front of it.
- An IPv6 client counts as its /64: one host on a LAN can take any address of its prefix.
- A request with ``X-Forwarded-For`` from a peer that is not trusted is said once per peer (a
  warning and a ``web_untrusted_proxy`` event, which ``luna doctor`` reads): behind such a
  proxy every client is one source, so one guessing neighbour slows the owner's logins too.
"""

from __future__ import annotations

import ipaddress
import logging

from aiohttp import web

from luna.observe import log_event

log = logging.getLogger(__name__)

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
MAX_NOTED = 256


def _address(text: str) -> Address | None:
    try:
        return ipaddress.ip_address(text.strip().strip("[]"))
    except ValueError:
        return None


def _source(address: Address) -> str:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    if isinstance(address, ipaddress.IPv6Address):
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


class Peers:
    """The ``web.trusted_proxies`` rule over requests."""

    def __init__(self, trusted_proxies: list[str]) -> None:
        self._trusted = [ipaddress.ip_network(n, strict=False) for n in trusted_proxies]
        self._noted: set[str] = set()

    def is_trusted(self, address: Address | None) -> bool:
        if address is None:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in net for net in self._trusted)

    def _through_trusted_proxy(self, request: web.Request) -> bool:
        peer = _address(request.remote or "")
        if self.is_trusted(peer):
            return True
        if "X-Forwarded-For" in request.headers and len(self._noted) < MAX_NOTED:
            shown = str(peer) if peer is not None else "?"
            if shown not in self._noted:
                self._noted.add(shown)
                log.warning(
                    "web: a request came through a proxy at %s that web.trusted_proxies does "
                    "not list: its clients count as one source for the login throttle",
                    shown,
                )
                log_event("web_untrusted_proxy", peer=shown)
        return False

    def source(self, request: web.Request) -> str:
        """The client's address, as the throttle counts it."""
        peer = _address(request.remote or "")
        if peer is None:
            return request.remote or "?"
        if not self._through_trusted_proxy(request):
            return _source(peer)
        hops = ",".join(request.headers.getall("X-Forwarded-For", [])).split(",")
        for hop in reversed(hops):
            address = _address(hop)
            if address is None:
                break  # garbage where the proxy writes: count the proxy itself
            if not self.is_trusted(address):
                return _source(address)
        return _source(peer)

    def is_https(self, request: web.Request) -> bool:
        """TLS here, or at a trusted proxy that says so in ``X-Forwarded-Proto``."""
        if request.secure:
            return True
        if not self._through_trusted_proxy(request):
            return False
        proto = request.headers.get("X-Forwarded-Proto", "").split(",")[0]
        return proto.strip().lower() == "https"
