"""``luna replay SESSION [--turn N | --step K] [--send]``: any past request, exactly as sent.

The request log keeps every request's body (content-addressed, see
``luna.memory.storage.request_log``), so a past step is rebuilt byte for byte: printed, or sent
again to the configured server to compare its answer with the one recorded. ``--list`` shows the
sessions and their steps.

Invariants: read-only on Luna's data; ``--send`` sends one non-streaming request and prints
both answers; the API key travels only in the Authorization header.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

import httpx

from luna.config import Config
from luna.memory.storage.request_log import LoggedRequest, RequestLog
from luna.messages import neutralize, terminal_json

SEND_TIMEOUT = 600.0


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "replay",
        help="print (or send again) the exact request of any past step of a session",
        description=(
            "Rebuild a past LLM request from the request log. Without --turn/--step: the last "
            "request of the session. Examples: `luna replay repl-20261201-0930-ab12cd --turn 3`"
            ", `luna replay dm-1234 --step 7 --send`."
        ),
    )
    p.add_argument("session", nargs="?", help="session id (see --list)")
    p.add_argument("--list", action="store_true", help="list sessions and their request counts")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--turn", type=int, help="the Nth turn of the session (1 = first)")
    which.add_argument("--step", type=int, help="the Kth request of the session (1 = first)")
    p.add_argument("--send", action="store_true", help="send it again and compare the answers")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=run_replay)


def pick(requests: list[LoggedRequest], turn: int | None, step: int | None) -> list[LoggedRequest]:
    """The requests of the chosen turn, the chosen step, or the last request."""
    if step is not None:
        return [requests[step - 1]] if 1 <= step <= len(requests) else []
    if turn is None:
        return requests[-1:]
    turns = list(dict.fromkeys(r.turn_id for r in requests))
    if not 1 <= turn <= len(turns):
        return []
    return [r for r in requests if r.turn_id == turns[turn - 1]]


async def send_again(cfg: Config, body: dict[str, Any]) -> dict[str, Any]:
    """One non-streaming request with the recorded body; returns the server's message."""
    body = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    body["return_progress"] = False
    headers = {"Authorization": f"Bearer {cfg.llm.api_key}"} if cfg.llm.api_key else {}
    url = f"{cfg.llm.endpoint.rstrip('/')}/chat/completions"
    async with httpx.AsyncClient(timeout=SEND_TIMEOUT, trust_env=False) as client:
        r = await client.post(url, json=body, headers=headers)
    data = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
    if r.status_code != 200:
        return {"error": f"HTTP {r.status_code}: {(data.get('error') or {}).get('message', '')}"}
    choice = (data.get("choices") or [{}])[0]
    return {**(choice.get("message") or {}), "finish_reason": choice.get("finish_reason")}


def _answer(message: dict[str, Any] | None) -> str:
    if not message:
        return "(no answer recorded)"
    if "error" in message:
        return f"error: {message['error']}"
    parts = []
    if message.get("reasoning_content"):
        parts.append(f"[reasoning] {message['reasoning_content']}")
    if message.get("content"):
        parts.append(str(message["content"]))
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        parts.append(f"[tool call] {fn.get('name')}({fn.get('arguments')})")
    return "\n".join(parts) or "(empty)"


async def run_replay(args: argparse.Namespace, cfg: Config) -> int:
    log = RequestLog.beside(cfg.memory.db_path)
    try:
        if args.list or not args.session:
            return await _list(log, as_json=args.json)
        requests = await asyncio.to_thread(log.for_session, args.session)
    finally:
        log.close()
    chosen = pick(requests, args.turn, args.step)
    if not chosen:
        print(
            f"no such request in session {args.session!r} ({len(requests)} recorded; "
            "see `luna replay --list`)",
            file=sys.stderr,
        )
        return 1
    for req in chosen:
        step = requests.index(req) + 1
        again = await send_again(cfg, req.body) if args.send else None
        if args.json:
            print(terminal_json({"step": step, "request": req.body, "recorded": req.reply,
                                 "again": again}))  # fmt: skip
            continue
        print(f"== step {step} of {len(requests)}, turn {req.turn_id}, {req.created_at}")
        print(terminal_json(req.body, indent=1))
        if args.send:
            print(neutralize(f"-- recorded answer:\n{_answer(req.reply)}"))
            print(neutralize(f"-- answer now:\n{_answer(again)}"))
    return 0


async def _list(log: RequestLog, *, as_json: bool) -> int:
    rows = await asyncio.to_thread(log.sessions)
    if as_json:
        print(terminal_json(rows))
    elif not rows:
        print("no requests recorded yet")
    for row in rows if not as_json else []:
        line = f"{row['session_id']:<40} {row['requests']:>5} requests  last {row['last']}"
        print(neutralize(line))
    return 0
