"""Luna's own JSON API, part one: sessions and their history, live events, approvals, memory.

Job: thin handlers over the parts the CLI and the other front-ends use: ``luna.memory.browse``
(the views ``luna memory … --json`` prints), the ``Memory`` facade (recall, add_memory,
forget, list_memories), the turn runner and the approval broker.

Invariants:
- Every handler answers JSON (``{"error": "…"}`` with a 4xx status for a bad request), except
  ``/api/events``, which is the Server-Sent Events stream.
- Input is checked here (types, ranges) before it reaches memory; memory's own errors
  (``MemoryStoreError``) become 400s with their one line.
- Reads page through big tables (``limit`` at most ``browse.MAX_PAGE``).
- Bodies, ids and query integers go through :mod:`luna.frontends.web.inputs`; a memory is at
  most ``MAX_MEMORY_CHARS`` characters (413 beyond).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from luna import __version__
from luna.errors import (
    AttachmentError,
    MemoryStoreError,
    NoSuchSessionError,
    SessionInUseError,
)
from luna.frontends.web.auth import AUTH
from luna.frontends.web.events import sse_stream
from luna.frontends.web.files import form_uploads
from luna.frontends.web.inputs import ApiError, error, json_body, path_id, query_int
from luna.frontends.web.state import state
from luna.frontends.web.turns import TurnRefusedError, new_session_id, valid_session_id
from luna.memory import browse, sessions
from luna.messages import Attachment

# A memory is one fact, recalled into prompts next to others: 4,000 characters (about 1,000
# tokens) holds a long paragraph, and keeps a handful of recalled memories within a prompt.
MAX_MEMORY_CHARS = 4000
MAX_SESSION_ID = 512  # a chat app's id is longer than the web's own (web/turns.py)


# ---- who am I ----------------------------------------------------------------------------


async def me(request: web.Request) -> web.Response:
    """``GET /api/me``: how this request was let in, limits, version. Never the login's CSRF
    token: only the ``POST /login`` answer carries it (see ``auth``)."""
    st = state(request)
    return web.json_response(
        {
            "auth": request.get(AUTH),
            "version": __version__,
            "approval_timeout": st.cfg.tools.approval_timeout,
        }
    )


# ---- sessions ----------------------------------------------------------------------------


async def list_sessions(request: web.Request) -> web.Response:
    st = state(request)
    limit = query_int(request, "limit", 100, 1, browse.MAX_PAGE) or 100
    return web.json_response({"sessions": await browse.list_sessions(st.memory, limit)})


async def create_session(request: web.Request) -> web.Response:
    """``POST /api/sessions``: a fresh session id (the session exists once it has a message)."""
    return web.json_response({"id": new_session_id()}, status=201)


def _session_id(request: web.Request) -> str:
    sid = request.match_info["session_id"]
    if not valid_session_id(sid):
        raise ApiError(400, "invalid session id")
    return sid


def _any_session_id(request: web.Request) -> str:
    """Any front-end's session id (a Matrix room's too), not only the web's own."""
    sid = request.match_info["session_id"]
    if not sid or len(sid) > MAX_SESSION_ID or not sid.isprintable():
        raise ApiError(400, "invalid session id")
    return sid


async def session_footprint(request: web.Request) -> web.Response:
    """``GET /api/sessions/{id}``: what forgetting it would remove (the page's question before
    ``DELETE``, as ``luna sessions forget`` asks): counts of messages, files and memories, the
    first and last message's times, and the scheduled tasks made in it (they stay); 404 when
    nothing has that id."""
    sid = _any_session_id(request)
    seen = await sessions.footprint(state(request).memory, sid)
    if seen is None:
        return error(404, f"no session {sid!r}")
    return web.json_response(
        {
            "id": seen.session_id,
            "messages": seen.messages,
            "files": seen.files,
            "memories": seen.memories,
            "first_at": seen.first_at,
            "last_at": seen.last_at,
            "tasks": seen.tasks,
        }
    )


async def forget_session(request: web.Request) -> web.Response:
    """``DELETE /api/sessions/{id}[?keep_memories=1]`` (as ``luna sessions forget --yes``):
    the session and what came from it, files included; 409 while a turn runs in it. The event
    stream says ``session_forgotten``, so a page showing it elsewhere moves on."""
    st = state(request)
    sid = _any_session_id(request)
    keep = request.query.get("keep_memories", "") in ("1", "true")
    try:
        async with st.agent.idle_session(sid):
            outcome = await sessions.forget_session(
                st.memory, sid, keep_memories=keep, outputs_dir=st.cfg.tools.outputs_dir
            )
    except NoSuchSessionError as e:
        return error(404, str(e))
    except SessionInUseError as e:
        return error(409, str(e))
    st.hub.publish({"type": "session_forgotten", "session_id": sid})  # other open pages
    rows = outcome.rows
    return web.json_response(
        {
            "forgotten": sid,
            "messages": rows.messages,
            "memories": rows.memories,
            "summaries": rows.summaries,
            "files_removed": outcome.files_removed,
            "files_kept": outcome.files_kept,
            "outputs_removed": outcome.outputs_removed,
            "requests": outcome.requests,
            "requests_error": outcome.requests_error or None,
        }
    )


async def session_messages(request: web.Request) -> web.Response:
    """``GET /api/sessions/{id}/messages?before=ID&limit=N``: one page, oldest first."""
    st = state(request)
    before = query_int(request, "before", None, 0, 2**62)
    limit = query_int(request, "limit", 100, 1, browse.MAX_PAGE) or 100
    page = await browse.history_page(st.memory, _session_id(request), before_id=before, limit=limit)
    return web.json_response(page)


async def post_message(request: web.Request) -> web.Response:
    """``POST /api/sessions/{id}/messages``: starts a turn (202); its events arrive on
    ``/api/events``. The body is JSON ``{"text": …}``, or ``multipart/form-data`` with a
    ``text`` field and ``file`` parts (the page's attach, paste and drop); the answer lists
    the files taken and a line for each refused one."""
    st = state(request)
    session = _session_id(request)
    files: tuple[Attachment, ...] = ()
    refused: list[str] = []
    if request.content_type == "multipart/form-data":
        if st.intake is None:
            return error(400, "this Luna takes no files")
        try:
            text, uploads = await form_uploads(await request.multipart(), st.cfg)
        except (AttachmentError, ValueError) as e:
            return error(400, f"the form cannot be read: {e}")
        got = await st.intake.take_all(uploads, text)
        text, files, refused = got.message_text(text), tuple(got.attachments), got.refusals
    else:
        body = await json_body(request)
        sent = body.get("text")
        if not isinstance(sent, str):
            return error(400, "'text' must be a string")
        text = sent
    try:
        turn = await st.runner.start(session, text, source="page", attachments=files)
    except TurnRefusedError as e:
        return error(e.status, str(e))
    taken = [{"name": a.name, "kind": a.kind, "mime": a.mime, "size": a.size} for a in files]
    answer = {"turn_id": turn.id, "session_id": turn.session_id, "files": taken}
    return web.json_response({**answer, "refused": refused}, status=202)


async def events(request: web.Request) -> web.StreamResponse:
    """``GET /api/events``: every turn's events and every approval, as SSE. The first event,
    ``hello``, holds the running turns so far and the pending approvals."""
    st = state(request)

    def hello() -> dict[str, Any]:
        if st.scheduler is not None:
            st.scheduler.router.kick("web")  # results held while no page was open
        return {"type": "hello", "running": st.runner.running(), "approvals": st.broker.pending()}

    return await sse_stream(request, st.hub, hello)


# ---- approvals ---------------------------------------------------------------------------


async def list_approvals(request: web.Request) -> web.Response:
    return web.json_response({"approvals": state(request).broker.pending()})


async def decide_approval(request: web.Request) -> web.Response:
    """``POST /api/approvals/{id}`` ``{"decision": "approve" | "deny"}``."""
    body = await json_body(request)
    decision = body.get("decision")
    if decision not in ("approve", "deny"):
        return error(400, '\'decision\' must be "approve" or "deny"')
    if not state(request).broker.decide(request.match_info["approval_id"], decision == "approve"):
        return error(404, "no such pending approval (already answered, or it timed out: denied)")
    return web.json_response({"ok": True, "decision": decision})


# ---- memory ------------------------------------------------------------------------------


async def memory_index(request: web.Request) -> web.Response:
    """``GET /api/memory?q=…&k=…&scope=…`` searches (hybrid recall, as ``luna memory search``);
    without ``q`` it lists memories newest first (as ``luna memory list``)."""
    st = state(request)
    query = request.query.get("q", "").strip()
    scope = request.query.get("scope") or None
    if query:
        k = query_int(request, "k", 20, 1, 100)
        items = await st.memory.recall(query, scope=scope or "owner", k=k)
        return web.json_response(
            {"query": query, "results": [browse.recall_json(i) for i in items]}
        )
    limit = query_int(request, "limit", 100, 1, browse.MAX_PAGE) or 100
    rows = await st.memory.list_memories(scope=scope, limit=limit)
    return web.json_response({"memories": rows})


async def memory_detail(request: web.Request) -> web.Response:
    """``GET /api/memory/{id}``: provenance and supersession of one memory."""
    memory_id = path_id(request, "memory_id", "a memory")
    detail = await browse.memory_detail(state(request).memory, memory_id)
    if detail is None:
        return error(404, f"no memory #{memory_id}")
    return web.json_response(detail)


async def add_memory(request: web.Request) -> web.Response:
    """``POST /api/memory`` ``{"text", "importance"?: 1-10, "scope"?}`` (as ``memory add``);
    ``text`` is at most ``MAX_MEMORY_CHARS``."""
    body = await json_body(request)
    text, importance = body.get("text"), body.get("importance", 5)
    scope = body.get("scope", "owner")
    if not isinstance(text, str) or not text.strip():
        return error(400, "'text' must be a non-empty string")
    if len(text) > MAX_MEMORY_CHARS:
        return error(
            413,
            f"a memory is at most {MAX_MEMORY_CHARS:,} characters (this one: {len(text):,}); "
            "keep one fact per memory",
        )
    if isinstance(importance, bool) or not isinstance(importance, int) or not 1 <= importance <= 10:
        return error(400, "'importance' must be an integer 1-10")
    if not isinstance(scope, str) or not scope:
        return error(400, "'scope' must be a string")
    try:
        mem_id = await state(request).memory.add_memory(
            text, importance=importance, source="user", scope=scope
        )
    except MemoryStoreError as e:
        return error(400, str(e))
    return web.json_response({"id": mem_id}, status=201)


async def forget_memory(request: web.Request) -> web.Response:
    """``DELETE /api/memory/{id}`` (as ``memory forget``)."""
    memory_id = path_id(request, "memory_id", "a memory")
    if not await state(request).memory.forget(memory_id):
        return error(404, f"no memory #{memory_id}")
    return web.json_response({"forgotten": memory_id})


def routes() -> list[web.RouteDef]:
    return [
        web.get("/api/me", me),
        web.get("/api/sessions", list_sessions),
        web.post("/api/sessions", create_session),
        web.get("/api/sessions/{session_id}", session_footprint),
        web.delete("/api/sessions/{session_id}", forget_session),
        web.get("/api/sessions/{session_id}/messages", session_messages),
        web.post("/api/sessions/{session_id}/messages", post_message),
        web.get("/api/events", events),
        web.get("/api/approvals", list_approvals),
        web.post("/api/approvals/{approval_id}", decide_approval),
        web.get("/api/memory", memory_index),
        web.post("/api/memory", add_memory),
        web.get("/api/memory/{memory_id}", memory_detail),
        web.delete("/api/memory/{memory_id}", forget_memory),
    ]
