"""``luna hooks …``: list the webhooks, sign a body as a caller would, send a test event.

Invariants:
- ``sign`` prints exactly the two headers a caller sends (``luna.hooks.signing``, the one
  definition), for a body read as bytes from stdin: nothing is added or re-encoded.
- ``test`` sends a signed event to the running Luna at ``web.host``/``web.port`` (a wildcard
  address is reached on loopback) and prints the answer: a real event, run as a turn.
- A secret is read from the environment only, never printed; a hook that is not configured
  or has no secret is one line on stderr (exit 2).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

import httpx

from luna.config import Config
from luna.config.hooks import HookConfig, secret_var, session_of
from luna.config.secrets import hook_secret_problem
from luna.errors import UsageError
from luna.hooks.signing import sign
from luna.hooks.target import hook_target
from luna.messages import neutralize

TEST_EVENT = {"event": "luna hooks test", "text": "A test event sent with `luna hooks test`."}
SEND_TIMEOUT_S = 30.0
WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("hooks", help="webhooks: list them, sign a body, send a test event")
    sub = p.add_subparsers(dest="hooks_command", required=True, metavar="COMMAND")
    ls = sub.add_parser("list", help="the [hooks.NAME] tables: URL, secret, session, target")
    ls.set_defaults(handler=list_cmd)
    s = sub.add_parser(
        "sign",
        help="print the two signature headers for a body read from stdin",
        description="Sign the bytes on stdin as hook NAME's caller would: prints "
        "X-Luna-Timestamp and X-Luna-Signature lines (the secret comes from the environment, "
        "LUNA_HOOK_<NAME>_SECRET unless the hook names its secret_env). Example: "
        "luna hooks sign door < event.json",
    )
    s.add_argument("name", help="the hook (a [hooks.NAME] table)")
    s.add_argument("--at", type=int, metavar="UNIX", help="sign at this time (default: now)")
    s.set_defaults(handler=sign_cmd)
    t = sub.add_parser(
        "test",
        help="send a signed event to the running Luna (it runs a turn)",
        description="Sign an event and POST it to the running Luna's /hooks/NAME, as a "
        "caller would; prints the HTTP status and answer. The event runs a real turn and "
        "its result goes to the hook's target.",
    )
    t.add_argument("name", help="the hook (a [hooks.NAME] table)")
    t.add_argument("--body", metavar="FILE", help="the JSON to send (default: a sample event)")
    t.add_argument("--url", help="Luna's web address (default: from web.host and web.port)")
    t.set_defaults(handler=test_cmd)


def _hook(cfg: Config, name: str) -> HookConfig:
    hook = cfg.hooks.get(name)
    if hook is None:
        known = ", ".join(cfg.hooks) or "none"
        where = cfg.path or "the configuration"
        raise UsageError(f"there is no [hooks.{name}] in {where} (hooks: {known})")
    problem = hook_secret_problem(hook.secret, secret_var(name, hook))
    if problem:
        raise UsageError(f"hook {name}: {problem}")
    return hook


async def list_cmd(args: argparse.Namespace, cfg: Config) -> int:
    if not cfg.hooks:
        print("no webhooks: add a [hooks.NAME] table to config.toml (README: Webhooks)")
        return 0
    for name, hook in cfg.hooks.items():
        var = secret_var(name, hook)
        secret = hook_secret_problem(hook.secret, var) or f"secret in {var}"
        target, why = hook_target(cfg, name, hook)
        where = f"{target.frontend} {target.address or ''}".strip() if target else f"({why})"
        print(
            neutralize(
                f"{name}: POST /hooks/{name}; {secret}; session {session_of(name, hook)}; "
                f"results to {where}; {hook.per_minute}/min, {hook.max_body_bytes:,} bytes"
            )
        )
    return 0


async def sign_cmd(args: argparse.Namespace, cfg: Config) -> int:
    hook = _hook(cfg, args.name)
    body = await asyncio.to_thread(sys.stdin.buffer.read)
    for header, value in sign(hook.secret, body, now=args.at).items():
        print(f"{header}: {value}")
    return 0


def _url(cfg: Config, name: str, given: str | None) -> str:
    if given:
        return f"{given.rstrip('/')}/hooks/{name}"
    if cfg.web.port == 0:
        raise UsageError("web.port is 0 (Luna picks a free port at start): pass --url")
    host = WILDCARDS.get(cfg.web.host, cfg.web.host)
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{cfg.web.port}/hooks/{name}"


async def test_cmd(args: argparse.Namespace, cfg: Config) -> int:
    hook = _hook(cfg, args.name)
    if args.body:
        try:
            body = await asyncio.to_thread(_read, args.body)
        except OSError as e:
            raise UsageError(f"cannot read {args.body}: {e.strerror}") from None
    else:
        body = json.dumps(TEST_EVENT).encode()
    url = _url(cfg, args.name, args.url)
    headers = {**sign(hook.secret, body), "Content-Type": "application/json"}
    try:
        async with httpx.AsyncClient(timeout=SEND_TIMEOUT_S) as client:
            resp = await client.post(url, content=body, headers=headers)
    except httpx.HTTPError as e:
        print(f"luna hooks test: cannot reach {url}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(neutralize(f"{resp.status_code} {resp.text.strip()}"))
    return 0 if resp.status_code == 202 else 1


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()
