"""Who may use the web front-end: the bearer token, browser logins, CSRF and security headers.

Job: one aiohttp middleware (:func:`guard_middleware`) that lets a request through only when it
carries ``LUNA_WEB_TOKEN`` (``Authorization: Bearer …``, for API clients) or the cookie of a
browser login made with that token; the login and logout handlers; the response headers.

Invariants:
- The token is accepted only in the ``Authorization`` header or the body of ``POST /login``;
  a request that puts it (or any ``token``/``access_token``/``api_key``) in the query string is
  refused, whatever else it carries.
- A login is a random id in an ``HttpOnly; SameSite=Strict`` cookie, kept in memory (a
  restart logs everyone out); the token itself never reaches the browser's storage. Over
  HTTPS (here, or at a trusted proxy) the cookie is ``__Host-luna_login``: ``Secure``, for this
  host only, so no plain-HTTP server on another port of the host ever receives it; over HTTPS
  only that name counts, over plain HTTP only ``luna_login``.
- A cookie alone opens nothing: browsers send it to every port of the host, so a server on
  another port may hold it. Every request made with it also needs the login's second secret
  in ``X-CSRF-Token``, which only the ``POST /login`` answer carries (the page keeps it in
  its origin's storage, which no other port can read); no endpoint hands it out again.
- Every state-changing request made with the cookie must show that the browser sent it from
  this page: ``Sec-Fetch-Site: same-origin``, or else an ``Origin`` of this host; a request
  with neither (a script) is refused, and so is ``POST /login``. Bearer requests need none of
  this: no other site can make a browser send that header, since nothing here answers CORS
  (no ``Access-Control-*`` header is ever sent; preflights get 403).
- Comparisons of secrets are constant-time. Every request that offers the token takes an
  attempt from its source's bucket (:mod:`luna.frontends.web.throttle`) before the comparison;
  a wrong one is slowed and keeps it spent, the right one gets it back. Sources and HTTPS come
  from :mod:`luna.frontends.web.peers` (forwarded headers only from ``web.trusted_proxies``).
- Only the page's static files, ``/login`` and ``/hooks/NAME`` are reachable without the token;
  a webhook proves itself with its own secret (``hooks_api``) and reaches nothing else.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.typedefs import Middleware

from luna.config.secrets import HOW_TO_MAKE_WEB_TOKEN, web_token_problem
from luna.frontends.web.inputs import ApiError, error, json_body
from luna.frontends.web.peers import Peers
from luna.frontends.web.throttle import Throttle
from luna.observe import log_event

log = logging.getLogger(__name__)

COOKIE = "luna_login"
HOST_COOKIE = "__Host-luna_login"  # over HTTPS
CSRF_HEADER = "X-CSRF-Token"
LOGIN_TTL_S = 7 * 86_400
MAX_LOGINS = 64
URL_TOKEN_PARAMS = ("token", "access_token", "api_key", "key", "auth")
AUTH: web.RequestKey[str] = web.RequestKey("luna_auth", str)  # "bearer" or "cookie"
PUBLIC_PATHS = ("/", "/login", "/favicon.ico")
HOOKS_PREFIX = "/hooks/"  # POST /hooks/NAME: signed with the hook's secret (hooks_api)
SAFE_METHODS = ("GET", "HEAD")

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=()",
}

HOW_TO_SET = HOW_TO_MAKE_WEB_TOKEN
token_problem = web_token_problem  # the rule lives in luna.config.secrets (doctor applies it too)


@dataclass
class Login:
    id: str
    csrf: str
    expires: float


LOGIN: web.RequestKey[Login] = web.RequestKey("luna_login", Login)


class Logins:
    """Browser logins, in memory; the oldest goes when there are too many."""

    def __init__(self, ttl: float = LOGIN_TTL_S) -> None:
        self.ttl = ttl
        self._by_id: dict[str, Login] = {}

    def create(self) -> Login:
        while len(self._by_id) >= MAX_LOGINS:
            self._by_id.pop(next(iter(self._by_id)))
        login = Login(secrets.token_urlsafe(32), secrets.token_urlsafe(32), time.time() + self.ttl)
        self._by_id[login.id] = login
        return login

    def get(self, login_id: str | None) -> Login | None:
        login = self._by_id.get(login_id or "")
        if login is None:
            return None
        if time.time() > login.expires:
            del self._by_id[login.id]
            return None
        return login

    def drop(self, login_id: str) -> None:
        self._by_id.pop(login_id, None)


class Guard:
    """The token, the logins, the attempt throttle and the proxy rule of one web front-end."""

    def __init__(self, token: str, trusted_proxies: list[str], *, failure_delay: float) -> None:
        self._token = token.encode()
        self.failure_delay = failure_delay  # seconds a wrong token waits (web.failure_delay)
        self.logins = Logins()
        self.throttle = Throttle()
        self.peers = Peers(trusted_proxies)

    def is_token(self, candidate: str) -> bool:
        return hmac.compare_digest(candidate.encode(), self._token)

    async def judge(self, source: str, candidate: object) -> bool:
        """Compare a candidate token whose attempt ``source`` has already taken: the right one
        gets its attempt back, a wrong one keeps it spent and is slowed."""
        if isinstance(candidate, str) and self.is_token(candidate):
            self.throttle.refund(source)
            return True
        await asyncio.sleep(self.failure_delay)
        return False

    def cookie_name(self, request: web.Request) -> str:
        return HOST_COOKIE if self.peers.is_https(request) else COOKIE

    def too_many(self, source: str) -> web.Response:
        wait = self.throttle.retry_after(source)
        resp = error(429, f"too many failed attempts from your address; try again in {wait} s")
        resp.headers["Retry-After"] = str(wait)
        return resp

    def bearer(self, request: web.Request) -> str | None:
        header = request.headers.get("Authorization", "")
        scheme, _, value = header.partition(" ")
        return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def is_same_origin(request: web.Request) -> bool:
    """True only when the browser says this page made the request: ``Sec-Fetch-Site:
    same-origin``, or (from browsers without it) an ``Origin`` naming this host. Neither
    header, ``same-site`` (another port of this host), ``none`` or ``null`` are refused."""
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None:
        return site == "same-origin"
    origin = request.headers.get("Origin")
    if not origin or origin == "null":
        return False
    return urlsplit(origin).netloc.lower() == request.host.lower()


def _is_public(request: web.Request) -> bool:
    """The page's files, ``/login``, and webhooks (each guarded by its own secret)."""
    path = request.path
    return path in PUBLIC_PATHS or path.startswith(("/static/", HOOKS_PREFIX))


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def guard_middleware(guard: Guard) -> Middleware:
    """The middleware enforcing the module's invariants."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if any(name in request.query for name in URL_TOKEN_PARAMS):
            return error(
                400,
                "credentials are never accepted in a URL; send Authorization: Bearer, or log "
                "in on the page",
            )
        if request.method == "OPTIONS":
            return error(403, "cross-origin requests are not allowed")
        try:
            return await _admit(request, handler)
        except ApiError as e:
            return error(e.status, str(e))
        except web.HTTPException:
            raise  # aiohttp's own answers: 404, 405, 413
        except Exception as e:  # a bug: one line on the console, no traceback
            log.error(
                "web: %s %s failed: %s (traceback in the event log)",
                request.method,
                request.path,
                type(e).__name__,
            )
            log_event(
                "web_request_failed",
                method=request.method,
                path=request.path,
                error=type(e).__name__,
                traceback=traceback.format_exc(),
            )
            return error(500, "internal error; see Luna's log")

    async def _admit(request: web.Request, handler: Handler) -> web.StreamResponse:
        if _is_public(request):
            return await handler(request)
        token = guard.bearer(request)
        if token is not None:
            source = guard.peers.source(request)
            if not guard.throttle.take(source):  # before any await: a burst can't all pass
                return guard.too_many(source)
            if not await guard.judge(source, token):
                return error(401, "wrong token")
            request[AUTH] = "bearer"
            return await handler(request)
        login = guard.logins.get(request.cookies.get(guard.cookie_name(request)))
        if login is None:
            return error(401, "log in first (or send Authorization: Bearer <LUNA_WEB_TOKEN>)")
        sent = request.headers.get(CSRF_HEADER, "")
        if not hmac.compare_digest(sent.encode(), login.csrf.encode()):
            return error(403, f"missing or wrong {CSRF_HEADER}: log in again on the page")
        if request.method not in SAFE_METHODS and not is_same_origin(request):
            return error(403, "cross-site request refused")
        request[AUTH] = "cookie"
        request[LOGIN] = login
        return await handler(request)

    return middleware


async def add_security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: every response, streamed ones included."""
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    if not request.path.startswith("/static/"):
        response.headers.setdefault("Cache-Control", "no-store")
    else:
        response.headers.setdefault("Cache-Control", "no-cache")
    for name in list(response.headers):
        if name.lower().startswith("access-control-"):
            del response.headers[name]


def login_handler(guard: Guard) -> Handler:
    """``POST /login`` with ``{"token": …}`` as JSON from this site: sets the login cookie."""

    async def login(request: web.Request) -> web.StreamResponse:
        source = guard.peers.source(request)
        if not guard.throttle.take(source):  # before the body is read: a burst can't all pass
            return guard.too_many(source)
        if not is_same_origin(request):
            return error(403, "log in from Luna's page (cross-site or scripted login refused)")
        if request.content_type != "application/json":
            return error(415, "send the token as JSON")
        body = await json_body(request)  # a bad one keeps the attempt spent
        if not await guard.judge(source, body.get("token")):
            return error(401, "wrong token")
        made = guard.logins.create()
        resp = web.json_response({"csrf": made.csrf})  # the one answer that carries it
        name = guard.cookie_name(request)
        resp.set_cookie(
            name,
            made.id,
            max_age=int(guard.logins.ttl),
            path="/",
            httponly=True,
            samesite="Strict",
            secure=name == HOST_COOKIE,
        )
        return resp

    return login


def logout_handler(guard: Guard) -> Handler:
    """``POST /api/logout``: ends this browser login."""

    async def logout(request: web.Request) -> web.StreamResponse:
        login = request.get(LOGIN)
        if login is not None:
            guard.logins.drop(login.id)
        resp = web.json_response({"ok": True})
        name = guard.cookie_name(request)
        resp.del_cookie(name, path="/", secure=name == HOST_COOKIE, httponly=True)
        return resp

    return logout
