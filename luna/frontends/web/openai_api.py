"""The OpenAI-compatible API: ``GET /v1/models`` and ``POST /v1/chat/completions``.

Job: let any OpenAI client (the ``openai`` SDK, ``llm``, Open WebUI) talk to Luna as if it were
a model named ``luna``. Sessions and the reconciliation of resent history follow the rule in
:mod:`luna.frontends.web.reconcile`; each response names the session (``X-Luna-Session``) and
what the history meant (``X-Luna-History``: continued, replayed or diverged).

Invariants:
- The body goes through :func:`luna.frontends.web.inputs.json_body` (depth, surrogates, UTF-8)
  and ``stream``/``stream_options`` are type-checked: bad input is a 4xx, never a 500.
- Errors have OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``; a turn that
  fails is HTTP 502 (or, once streaming, one ``data: {"error": …}`` event), never a fake reply.
- Streaming follows the chat.completion.chunk format: a role chunk, content deltas (Luna's
  reasoning as ``reasoning_content`` deltas, as llama-server sends it), a finish chunk, a usage
  chunk when ``stream_options.include_usage`` asks, then ``[DONE]``.
- ``finish_reason`` is ``length`` when the server cut the final reply at max_tokens (it said
  so), else ``stop``, streaming or not.
- The last message's ``image_url`` parts (``data:`` URLs, or ``http(s)`` URLs fetched through
  web_fetch's SSRF guard) go through the attachments intake; a refused one is a line the
  model reads, never a silently dropped part.
- Luna's tools run inside the turn (approvals on the page); the client sees only the reply.
  Client-side ``tools`` are not offered to the model and are ignored.
- A dropped client does not cancel the turn (see :mod:`luna.frontends.web.turns`).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from aiohttp import web

from luna.frontends.web.events import sse_bytes
from luna.frontends.web.files import image_url_upload
from luna.frontends.web.inputs import ApiError, json_body
from luna.frontends.web.reconcile import (
    Reconciled,
    RequestError,
    conversation,
    image_urls,
    reconcile,
    session_for,
)
from luna.frontends.web.state import WebState, state
from luna.frontends.web.turns import TurnRefusedError, valid_session_id
from luna.memory.browse import conversation_tail
from luna.messages import Attachment
from luna.observe import log_event

MODEL = "luna"
SESSION_HEADER = "X-Luna-Session"
HISTORY_HEADER = "X-Luna-History"


def openai_error(status: int, message: str, kind: str = "invalid_request_error") -> web.Response:
    body = {"error": {"message": message, "type": kind, "param": None, "code": None}}
    return web.json_response(body, status=status)


async def models(request: web.Request) -> web.Response:
    """``GET /v1/models``: the one model, ``luna``."""
    return web.json_response(
        {
            "object": "list",
            "data": [{"id": MODEL, "object": "model", "created": 0, "owned_by": "luna"}],
        }
    )


def _usage(done: dict[str, Any] | None) -> dict[str, int]:
    usage = (done or {}).get("usage") or {}
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _finish_reason(done: dict[str, Any]) -> str:
    """OpenAI's finish_reason for a finished turn: ``length`` when the server cut the final
    reply at max_tokens, else ``stop`` (Luna's own tool calls are not the client's)."""
    return "length" if done.get("finish_reason") == "length" else "stop"


def _completion(
    cid: str, reply: str, usage: dict[str, int], finish: str = "stop"
) -> dict[str, Any]:
    return {
        "id": cid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply},
                "finish_reason": finish,
            }
        ],
        "usage": usage,
    }


def _chunk(cid: str, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


async def chat_completions(request: web.Request) -> web.StreamResponse:
    """``POST /v1/chat/completions``, streaming or not."""
    st = state(request)
    try:
        body = await json_body(request)
    except ApiError as e:
        return openai_error(e.status, str(e))
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        return openai_error(
            400, "'stream_options' must be an object, e.g. {\"include_usage\": true}"
        )
    if not isinstance(body.get("stream", False), bool | None):
        return openai_error(400, "'stream' must be true or false")
    session = session_for(request.headers.get(SESSION_HEADER), body.get("user"))
    if not valid_session_id(session):
        return openai_error(400, f"invalid session name {session[:40]!r}")
    try:
        client = conversation(body.get("messages"))
    except RequestError as e:
        return openai_error(400, str(e))
    tail = await conversation_tail(st.memory, session, min(len(client), 400) + 1)
    decision = reconcile(client, tail)
    log_event(
        "web_chat", session=session, history=decision.outcome, stream=bool(body.get("stream"))
    )
    headers = {SESSION_HEADER: session, HISTORY_HEADER: decision.outcome}
    is_stream = bool(body.get("stream"))
    include_usage = bool((options or {}).get("include_usage"))
    cid = f"chatcmpl-{uuid.uuid4().hex[:24]}"
    if decision.outcome == "replayed":
        return await _replay(request, decision, cid, headers, is_stream, include_usage)
    try:
        urls = image_urls(body["messages"][-1].get("content"))
        text, files = await _with_files(st, decision.text, urls)
        turn = await st.runner.start(session, text, source="api", attachments=files)
    except RequestError as e:
        return openai_error(400, str(e))
    except TurnRefusedError as e:
        kind = "server_error" if e.status >= 500 else "invalid_request_error"
        return openai_error(e.status, str(e), kind)
    if not is_stream:
        final: dict[str, Any] | None = None
        async for event in turn.follow():
            if event["type"] in ("done", "failed"):
                final = event
        if final is None or final["type"] == "failed":
            message = (final or {}).get("message") or "the turn ended without a reply"
            failed = openai_error(502, message, "luna_turn_failed")
            failed.headers.update(headers)
            return failed
        answer = _completion(cid, final["reply"], _usage(final), _finish_reason(final))
        return web.json_response(answer, headers=headers)
    resp = _stream_response(headers)
    await resp.prepare(request)
    try:
        await resp.write(sse_bytes(_chunk(cid, {"role": "assistant", "content": ""})))
        async for event in turn.follow():
            kind = event["type"]
            if kind == "text":
                await resp.write(sse_bytes(_chunk(cid, {"content": event["text"]})))
            elif kind == "reasoning":
                await resp.write(sse_bytes(_chunk(cid, {"reasoning_content": event["text"]})))
            elif kind == "failed":
                err = {"message": event["message"], "type": "luna_turn_failed", "code": None}
                await resp.write(sse_bytes({"error": err}))
                break
            elif kind == "done":
                await _finish(resp, cid, _usage(event), include_usage, _finish_reason(event))
                break
        await resp.write_eof()
    except ConnectionError:
        pass  # the client left; the turn goes on and its reply is logged
    return resp


async def _with_files(
    st: WebState, text: str, urls: list[str]
) -> tuple[str, tuple[Attachment, ...]]:
    """The message text and attachments once the intake has taken the images (a refused one
    is a line in the text: the model tells the client)."""
    if not urls:
        return text, ()
    if st.intake is None:
        raise RequestError("this Luna takes no files")
    uploads = [image_url_upload(st.cfg, url, i) for i, url in enumerate(urls, 1)]
    got = await st.intake.take_all(uploads, text)
    return got.message_text(text), tuple(got.attachments)


def _stream_response(headers: dict[str, str]) -> web.StreamResponse:
    return web.StreamResponse(
        headers={**headers, "Content-Type": "text/event-stream", "Cache-Control": "no-store"}
    )


async def _finish(
    resp: web.StreamResponse,
    cid: str,
    usage: dict[str, int],
    include_usage: bool,
    finish: str = "stop",
) -> None:
    await resp.write(sse_bytes(_chunk(cid, {}, finish)))
    if include_usage:
        last = {**_chunk(cid, {}), "choices": [], "usage": usage}
        await resp.write(sse_bytes(last))
    await resp.write(b"data: [DONE]\n\n")


async def _replay(
    request: web.Request,
    decision: Reconciled,
    cid: str,
    headers: dict[str, str],
    is_stream: bool,
    include_usage: bool,
) -> web.StreamResponse:
    """Answer a resent, already answered conversation from the log; no turn runs."""
    reply = decision.reply or ""
    usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    if not is_stream:
        return web.json_response(_completion(cid, reply, usage), headers=headers)
    resp = _stream_response(headers)
    await resp.prepare(request)
    try:
        await resp.write(sse_bytes(_chunk(cid, {"role": "assistant", "content": ""})))
        await resp.write(sse_bytes(_chunk(cid, {"content": reply})))
        await _finish(resp, cid, usage, include_usage)
        await resp.write_eof()
    except ConnectionError:
        pass
    return resp


def routes() -> list[web.RouteDef]:
    return [
        web.get("/v1/models", models),
        web.post("/v1/chat/completions", chat_completions),
    ]


__all__ = ["routes"]
