"""A loopback Telegram Bot API server for tests: real HTTP on 127.0.0.1, the documented wire.

It serves ``/bot<token>/<method>`` and ``/file/bot<token>/<path>`` for the methods Luna calls
(getMe, getUpdates, sendMessage, editMessageText, deleteMessage, sendChatAction,
answerCallbackQuery, getFile, setWebhook, deleteWebhook, getWebhookInfo), on its own event
loop in a thread, so a test in the same process or a Luna subprocess can use it, and it keeps
running while a Luna process is killed.

Invariants (the Bot API's documented behaviour, https://core.telegram.org/bots/api):
- Every answer is ``{"ok": true, "result": …}`` or ``{"ok": false, "error_code",
  "description", "parameters"?}``; a flood wait is 429 with ``parameters.retry_after``.
- getUpdates returns updates with ``update_id >= offset`` (oldest first, at most ``limit``)
  and forgets every one below ``offset`` (confirmed); with none it holds the request up to
  ``timeout`` seconds. While a webhook is set it answers 409.
- A text with ``parse_mode=HTML`` is parsed like Telegram does: only its tags, balanced, and
  ``&lt; &gt; &amp; &quot;`` and numeric entities; anything else is 400 "can't parse
  entities". A text longer than 4,096 UTF-16 code units after parsing is 400 "message is too
  long"; an empty one 400 "message text is empty"; editing to the same text 400 "message is
  not modified". A chat that blocked the bot answers 403.
- Tests script faults per method (:meth:`FakeTelegram.fault`: a status, a ``retry_after``, or
  a stall longer than the client waits) and read what was called (:attr:`calls`) and what a
  chat shows (:meth:`shown`: each bot message's text after its edits).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import ClientSession, web

from tests.fakes.telegram_html import EntityError, utf16, visible_text

TOKEN = "123456:TEST-token_for-the-fake-bot-api"
BOT_ID = 123456
BOT_USERNAME = "luna_test_bot"
MAX_TEXT = 4096
_INT_FIELDS = {"chat_id", "message_id", "message_thread_id", "offset", "limit", "timeout"}
_JSON_FIELDS = {"reply_markup", "allowed_updates", "reply_parameters", "link_preview_options"}


class ApiError(Exception):
    def __init__(self, status: int, description: str, retry_after: int | None = None) -> None:
        super().__init__(description)
        self.status = status
        self.description = description
        self.retry_after = retry_after


@dataclass
class Fault:
    status: int = 0  # 0: no error answer (a stall only)
    description: str = ""
    retry_after: int | None = None
    stall: float = 0.0  # seconds before answering (longer than the client waits: a timeout)
    times: int = 1
    when: Callable[[dict[str, Any]], bool] | None = None


@dataclass
class BotMessage:
    chat_id: int
    message_id: int
    text: str  # as shown (visible text)
    raw: str  # as sent
    parse_mode: str | None
    thread_id: int | None
    reply_markup: dict[str, Any] | None
    history: list[str] = field(default_factory=list)
    deleted: bool = False


class FakeTelegram:
    """The fake Bot API server; ``with FakeTelegram() as tg:`` starts and stops it."""

    def __init__(self, token: str = TOKEN) -> None:
        self.token = token
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.messages: dict[int, BotMessage] = {}  # by message id (one counter for all chats)
        self.files: dict[str, tuple[str, bytes]] = {}  # file_id -> (file_path, bytes)
        self.downloads: list[str] = []  # every file path fetched from the file URL
        self.blocked: set[int] = set()
        self.webhook: dict[str, Any] = {"url": ""}
        self.webhook_errors: list[str] = []
        self.offsets: list[int] = []  # every offset getUpdates was called with
        self.delivered: list[int] = []  # every update id getUpdates returned (repeats too)
        self._updates: list[dict[str, Any]] = []
        self._confirmed = 0  # every update_id below this is forgotten
        self._faults: dict[str, list[Fault]] = {}
        self._ids = itertools.count(1000)
        self._update_ids = itertools.count(1)
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._changed: asyncio.Condition | None = None
        self._closing = asyncio.Event()  # set on exit: held requests are answered at once
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.url = ""

    # ---- lifecycle ---------------------------------------------------------------------

    def __enter__(self) -> FakeTelegram:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _start(self) -> None:
        self._changed = asyncio.Condition()
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._api)
        app.router.add_get("/file/bot{token}/{path:.+}", self._file)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"

    async def _close(self) -> None:
        """Answer the requests still held (long polls, stalls) now, then stop: the server
        waits for every request in flight before it stops."""
        self._closing.set()
        await self._notify()
        await self._runner.cleanup()

    # ---- what a test does --------------------------------------------------------------

    def fault(self, method: str, **kw: Any) -> None:
        """The next call(s) of ``method`` fail as described (see :class:`Fault`)."""
        with self._lock:
            self._faults.setdefault(method, []).append(Fault(**kw))

    def user(self, user_id: int, name: str = "user") -> dict[str, Any]:
        return {"id": user_id, "is_bot": False, "first_name": name, "username": name}

    def message(
        self,
        sender: int,
        text: str = "",
        *,
        chat: dict[str, Any] | None = None,
        thread_id: int | None = None,
        reply_to: int | None = None,
        entities: list[dict[str, Any]] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> int:
        """A user writes ``text`` (a private chat unless ``chat``); returns the update id."""
        chat = chat or {"id": sender, "type": "private", "first_name": f"u{sender}"}
        msg: dict[str, Any] = {
            "message_id": next(self._ids),
            "date": int(time.time()),
            "chat": chat,
            "from": self.user(sender, f"u{sender}"),
        }
        if text:
            msg["text"] = text
        if entities:
            msg["entities"] = entities
        if thread_id is not None:
            msg["message_thread_id"] = thread_id
            msg["is_topic_message"] = True
        if reply_to is not None:
            replied = self.messages.get(reply_to)
            sender_of = {"id": BOT_ID, "is_bot": True, "first_name": "Luna",
                         "username": BOT_USERNAME} if replied else self.user(1)  # fmt: skip
            msg["reply_to_message"] = {"message_id": reply_to, "date": int(time.time()),
                                       "chat": chat, "from": sender_of}  # fmt: skip
        msg.update(extra or {})
        return self.push({"message": msg})

    def mention(self, sender: int, text: str, chat: dict[str, Any], **kw: Any) -> int:
        """``@luna_test_bot text`` in a group, with its mention entity."""
        full = f"@{BOT_USERNAME} {text}"
        entity = {"type": "mention", "offset": 0, "length": len(BOT_USERNAME) + 1}
        return self.message(sender, full, chat=chat, entities=[entity], **kw)

    def add_file(self, data: bytes, path: str) -> str:
        file_id = f"file-{len(self.files) + 1}"
        self.files[file_id] = (path, data)
        return file_id

    def press(self, sender: int, message_id: int, data: str) -> int:
        """A user presses an inline button of bot message ``message_id``."""
        m = self.messages[message_id]
        chat = {"id": m.chat_id, "type": "private" if m.chat_id > 0 else "supergroup"}
        query = {
            "id": f"cb{next(self._ids)}",
            "from": self.user(sender, f"u{sender}"),
            "chat_instance": "ci",
            "data": data,
            "message": {"message_id": message_id, "date": int(time.time()), "chat": chat,
                        "from": {"id": BOT_ID, "is_bot": True, "first_name": "Luna"}},
        }  # fmt: skip
        return self.push({"callback_query": query})

    def push(self, update: dict[str, Any]) -> int:
        with self._lock:
            update_id = next(self._update_ids)
            self._updates.append({"update_id": update_id, **update})
        self._loop.call_soon_threadsafe(lambda: self._loop.create_task(self._notify()))
        return update_id

    def pending_updates(self) -> list[int]:
        with self._lock:
            return [u["update_id"] for u in self._updates if u["update_id"] >= self._confirmed]

    def shown(self, chat_id: int) -> list[str]:
        """Each bot message of ``chat_id`` as it reads now, oldest first (deleted ones out)."""
        with self._lock:
            return [
                m.text for m in self.messages.values() if m.chat_id == chat_id and not m.deleted
            ]

    def bot_messages(self, chat_id: int) -> list[BotMessage]:
        with self._lock:
            return [m for m in self.messages.values() if m.chat_id == chat_id and not m.deleted]

    def called(self, method: str) -> list[dict[str, Any]]:
        with self._lock:
            return [p for m, p in self.calls if m == method]

    async def wait_for(self, check: Callable[[], object], within: float = 30.0) -> Any:
        """Poll ``check`` until it is truthy (its value) or fail after ``within`` seconds."""
        deadline = time.monotonic() + within
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {within}s waiting for {check}")
            await asyncio.sleep(0.02)

    async def send_webhook(self, update_id: int, secret: str | None) -> int:
        """POST one queued update to the webhook as Telegram does; the HTTP status."""
        with self._lock:
            update = next(u for u in self._updates if u["update_id"] == update_id)
        headers = {"X-Telegram-Bot-Api-Secret-Token": secret} if secret is not None else {}
        async with ClientSession() as session:
            async with session.post(self.webhook["url"], json=update, headers=headers) as r:
                return r.status

    # ---- the API -----------------------------------------------------------------------

    async def _notify(self) -> None:
        assert self._changed is not None
        async with self._changed:
            self._changed.notify_all()

    async def _params(self, request: web.Request) -> dict[str, Any]:
        raw: dict[str, Any] = dict(request.query)
        if request.can_read_body:
            if request.content_type == "application/json":
                raw.update(await request.json())
            else:
                raw.update({k: v for k, v in (await request.post()).items()})
        params: dict[str, Any] = {}
        for key, value in raw.items():
            if isinstance(value, str) and key in _INT_FIELDS:
                value = int(value)
            elif isinstance(value, str) and key in _JSON_FIELDS:
                value = json.loads(value)
            params[key] = value
        return params

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params = await self._params(request)
        params["_at"] = time.monotonic()
        with self._lock:
            self.calls.append((method, params))  # refused ones too
            if request.match_info["token"] != self.token:
                return web.json_response({"ok": False, "error_code": 401,
                                          "description": "Unauthorized"}, status=401)  # fmt: skip
            fault = self._take_fault(method, params)
        try:
            if fault is not None:
                if fault.stall:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._closing.wait(), fault.stall)
                if fault.status:
                    raise ApiError(fault.status, fault.description, fault.retry_after)
            handler = getattr(self, f"_m_{method}", None)
            if handler is None:
                raise ApiError(404, "Not Found: method not found")
            result = await handler(params)
        except ApiError as e:
            body: dict[str, Any] = {"ok": False, "error_code": e.status,
                                    "description": e.description}  # fmt: skip
            if e.retry_after is not None:
                body["parameters"] = {"retry_after": e.retry_after}
            return web.json_response(body, status=e.status)
        return web.json_response({"ok": True, "result": result})

    def _take_fault(self, method: str, params: dict[str, Any]) -> Fault | None:
        for fault in self._faults.get(method, []):
            if fault.times > 0 and (fault.when is None or fault.when(params)):
                fault.times -= 1
                return fault
        return None

    async def _file(self, request: web.Request) -> web.Response:
        path = request.match_info["path"]
        self.downloads.append(path)
        for file_path, data in self.files.values():
            if file_path == path:
                return web.Response(body=data)
        return web.Response(status=404)

    def _bot_user(self) -> dict[str, Any]:
        return {"id": BOT_ID, "is_bot": True, "first_name": "Luna", "username": BOT_USERNAME,
                "can_join_groups": True, "can_read_all_group_messages": False,
                "supports_inline_queries": False}  # fmt: skip

    async def _m_getMe(self, params: dict[str, Any]) -> Any:
        return self._bot_user()

    async def _m_getUpdates(self, params: dict[str, Any]) -> Any:
        if self.webhook["url"]:
            raise ApiError(409, "Conflict: can't use getUpdates method while webhook is active")
        offset = int(params.get("offset") or 0)
        limit = int(params.get("limit") or 100)
        with self._lock:
            self.offsets.append(offset)
            if offset:
                self._confirmed = max(self._confirmed, offset)
                self._updates = [u for u in self._updates if u["update_id"] >= offset]
        deadline = time.monotonic() + float(params.get("timeout") or 0)
        assert self._changed is not None
        while True:
            with self._lock:
                ready = [u for u in self._updates if u["update_id"] >= offset][:limit]
            left = deadline - time.monotonic()
            if ready or left <= 0 or self._closing.is_set():
                with self._lock:
                    self.delivered.extend(u["update_id"] for u in ready)
                return ready
            async with self._changed:
                try:
                    await asyncio.wait_for(self._changed.wait(), left)
                except TimeoutError:
                    pass

    def _check_text(self, params: dict[str, Any]) -> str:
        chat_id = int(params["chat_id"])
        if chat_id in self.blocked:
            raise ApiError(403, "Forbidden: bot was blocked by the user")
        text = str(params.get("text", ""))
        try:
            shown = visible_text(text, params.get("parse_mode"))
        except EntityError as e:
            raise ApiError(400, f"Bad Request: can't parse entities: {e}") from None
        if not shown.strip():
            raise ApiError(400, "Bad Request: message text is empty")
        if utf16(shown) > MAX_TEXT:
            raise ApiError(400, "Bad Request: message is too long")
        return shown

    def _message_json(self, m: BotMessage) -> dict[str, Any]:
        chat_type = "private" if m.chat_id > 0 else "supergroup"
        out: dict[str, Any] = {"message_id": m.message_id, "date": int(time.time()),
                               "chat": {"id": m.chat_id, "type": chat_type},
                               "from": self._bot_user(), "text": m.text}  # fmt: skip
        if m.thread_id is not None:
            out["message_thread_id"] = m.thread_id
        if m.reply_markup:
            out["reply_markup"] = m.reply_markup
        return out

    async def _m_sendMessage(self, params: dict[str, Any]) -> Any:
        shown = self._check_text(params)
        thread = params.get("message_thread_id")
        m = BotMessage(int(params["chat_id"]), next(self._ids), shown, str(params["text"]),
                       params.get("parse_mode"), int(thread) if thread else None,
                       params.get("reply_markup"), [shown])  # fmt: skip
        with self._lock:
            self.messages[m.message_id] = m
        return self._message_json(m)

    async def _m_editMessageText(self, params: dict[str, Any]) -> Any:
        shown = self._check_text(params)
        m = self.messages.get(int(params["message_id"]))
        if m is None or m.deleted or m.chat_id != int(params["chat_id"]):
            raise ApiError(400, "Bad Request: message to edit not found")
        markup = params.get("reply_markup")
        if shown == m.text and str(params["text"]) == m.raw and markup == m.reply_markup:
            raise ApiError(400, "Bad Request: message is not modified: specified new message "
                           "content and reply markup are exactly the same")  # fmt: skip
        with self._lock:
            m.text, m.raw, m.parse_mode, m.reply_markup = shown, str(params["text"]), params.get(
                "parse_mode"), markup  # fmt: skip
            m.history.append(shown)
        return self._message_json(m)

    async def _m_deleteMessage(self, params: dict[str, Any]) -> Any:
        m = self.messages.get(int(params["message_id"]))
        if m is None or m.deleted:
            raise ApiError(400, "Bad Request: message to delete not found")
        m.deleted = True
        return True

    async def _m_sendChatAction(self, params: dict[str, Any]) -> Any:
        if int(params["chat_id"]) in self.blocked:
            raise ApiError(403, "Forbidden: bot was blocked by the user")
        return True

    async def _m_answerCallbackQuery(self, params: dict[str, Any]) -> Any:
        return True

    async def _m_getFile(self, params: dict[str, Any]) -> Any:
        file_id = str(params["file_id"])
        if file_id not in self.files:
            raise ApiError(400, "Bad Request: invalid file_id")
        path, data = self.files[file_id]
        return {"file_id": file_id, "file_unique_id": f"u{file_id}", "file_size": len(data),
                "file_path": path}  # fmt: skip

    async def _m_setWebhook(self, params: dict[str, Any]) -> Any:
        self.webhook = {"url": str(params.get("url", "")),
                        "secret_token": params.get("secret_token")}  # fmt: skip
        return True

    async def _m_deleteWebhook(self, params: dict[str, Any]) -> Any:
        self.webhook = {"url": ""}
        return True

    async def _m_getWebhookInfo(self, params: dict[str, Any]) -> Any:
        info: dict[str, Any] = {"url": self.webhook["url"], "has_custom_certificate": False,
                                "pending_update_count": len(self.pending_updates())}  # fmt: skip
        if self.webhook_errors:
            info["last_error_date"] = int(time.time())
            info["last_error_message"] = self.webhook_errors[-1]
        return info
