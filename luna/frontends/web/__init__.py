"""The web front-end: a page on the LAN and an HTTP API, in Luna's process and event loop.

Modules: ``server`` (the aiohttp app and the front-end contract's ``check``/``make``/``run``),
``auth`` (token, browser logins, CSRF, headers), ``openai_api`` + ``reconcile`` (the
OpenAI-compatible API and how resent history maps onto the session log), ``luna_api`` and
``admin_api`` (Luna's JSON endpoints over the code the CLI uses), ``turns`` (background turns),
``events`` (agent events as JSON and SSE), ``approvals`` (approve/deny from the page),
``inputs`` (bodies, ids and numbers checked at the door), ``throttle`` and ``peers`` (token
attempts per source; who the source is behind a trusted proxy), ``hooks_api`` (signed
webhook events from other programs, ``POST /hooks/NAME``), and ``static/`` (the page:
plain ES modules, vendored Chart.js, marked and DOMPurify).

Invariant: the page and every API answer only to the ``LUNA_WEB_TOKEN`` bearer token or a
login made with it (a webhook only to its own secret); nothing below this package imports it.
"""

from luna.frontends.web.server import WebFrontend, check, make

__all__ = ["WebFrontend", "check", "make"]
