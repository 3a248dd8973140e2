"""The request log: every request sent to the model, exactly, for ``doctor cache`` and ``replay``.

Why a log of its own: the session log holds what was said, but a request is more than that
(the system prompt and summary of the moment, the tool list, trimmed results, the sampling
settings), and the summary is overwritten by each compaction. This log keeps each request's
exact body so any past step can be rebuilt byte for byte and sent again.

Invariants:
- Its own SQLite file (``requests.db`` next to the main database), ``synchronous=NORMAL``:
  diagnostic data, never on the durable path of a turn (no extra fsync per request), and a
  loss of its last records in a power cut costs nothing but diagnosis.
- Append-only, but for a session the user forgets (``forget_session``): its requests go,
  and the parts no other request uses.
- Content-addressed: each message, tool list and parameter set is stored once (sha256 of its
  canonical JSON); a request is the ordered list of those hashes, so a long session costs
  about its messages once plus a few bytes per request.
- Blocking methods; callers run them in a worker thread. Failures are logged and swallowed:
  diagnosis must never break a turn.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from luna.errors import MemoryStoreError
from luna.memory.storage import db
from luna.memory.storage.store import now_iso
from luna.messages import Usage, clean_value

log = logging.getLogger(__name__)

SCHEMA = [
    """CREATE TABLE IF NOT EXISTS parts (hash TEXT PRIMARY KEY, body TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS requests (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id TEXT NOT NULL,
        turn_id TEXT,
        created_at TEXT NOT NULL,
        params TEXT NOT NULL,
        tools TEXT,
        messages TEXT NOT NULL,
        reply TEXT,
        prompt_tokens INTEGER,
        cached_tokens INTEGER,
        prefilled_tokens INTEGER,
        prompt_ms REAL,
        error TEXT
    )""",
    "CREATE INDEX IF NOT EXISTS requests_session ON requests(session_id, id)",
]


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _canonical(value: Any) -> str:
    """``value`` as canonical JSON, valid UTF-8: a lone surrogate (a broken reply) is stored as
    U+FFFD, as in the session log. Only a text that has one is walked by ``clean_value``: the
    JSON of everything else is the same either way, and the walk was most of a record's time
    (the tool list alone is hundreds of strings, in every request)."""
    text = _dumps(value)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = _dumps(clean_value(value))
    return text


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:32]


@dataclass(frozen=True)
class LoggedRequest:
    """One request, rebuilt: the body as it was sent and what came back."""

    id: int
    session_id: str
    turn_id: str | None
    created_at: str
    body: dict[str, Any]
    reply: dict[str, Any] | None
    prompt_tokens: int | None
    cached_tokens: int | None
    prefilled_tokens: int | None
    prompt_ms: float | None
    error: str | None

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages") or [])


class RequestLog:
    """Writes and reads ``requests.db``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: db.Connection | None = None
        self._lock = threading.Lock()

    @classmethod
    def beside(cls, db_path: Path) -> RequestLog:
        return cls(db_path.with_name("requests.db"))

    def _connect(self) -> db.Connection:
        if self._conn is None:
            conn = db.connect(self.path, load_vec=False)
            conn.execute("PRAGMA synchronous = NORMAL")
            for sql in SCHEMA:
                conn.execute(sql)
            self._conn = conn
        return self._conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _put(self, conn: db.Connection, value: Any) -> str:
        text = _canonical(value)
        key = _digest(text)
        conn.execute("INSERT OR IGNORE INTO parts (hash, body) VALUES (?, ?)", (key, text))
        return key

    def record(
        self,
        session_id: str,
        turn_id: str | None,
        body: dict[str, Any],
        reply: dict[str, Any] | None,
        usage: Usage | None = None,
        error: str | None = None,
    ) -> None:
        """Append one request (never raises: a diagnosis failure must not break a turn)."""
        try:
            with self._lock:
                conn = self._connect()
                conn.execute("BEGIN")
                params = {k: v for k, v in body.items() if k not in ("messages", "tools")}
                row = (
                    session_id,
                    turn_id,
                    now_iso(),
                    self._put(conn, params),
                    self._put(conn, body["tools"]) if body.get("tools") else None,
                    json.dumps([self._put(conn, m) for m in body.get("messages") or []]),
                    self._put(conn, reply) if reply is not None else None,
                    getattr(usage, "prompt_tokens", None),
                    getattr(usage, "cached_tokens", None),
                    getattr(usage, "prefilled_tokens", None),
                    getattr(usage, "prompt_ms", None),
                    error,
                )
                conn.execute(
                    """INSERT INTO requests (session_id, turn_id, created_at, params, tools,
                       messages, reply, prompt_tokens, cached_tokens, prefilled_tokens,
                       prompt_ms, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                    row,
                )
                conn.execute("COMMIT")
        except (db.Error, OSError, TypeError, ValueError) as e:
            log.warning("request log: could not record a request: %s", e)
            self._abandon()

    def _abandon(self) -> None:
        """Roll back a failed record, so it cannot keep every later one from being written."""
        with self._lock:
            conn = self._conn
            if conn is not None and conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except db.Error:
                    self._conn = None
                    conn.close()

    def forget_session(self, session_id: str) -> int:
        """Delete the session's requests and the parts only they used; returns how many
        requests. Raises MemoryStoreError when the file cannot be changed (the caller says so:
        a forgotten session's text must not stay here silently)."""
        if not self.path.exists():
            return 0
        try:
            with self._lock:
                conn = self._connect()
                conn.execute("BEGIN IMMEDIATE")
                try:
                    removed = self._forget(conn, session_id)
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
                return removed
        except db.Error as e:
            raise MemoryStoreError(f"the request log {self.path} cannot be changed: {e}") from e

    @staticmethod
    def _forget(conn: db.Connection, session_id: str) -> int:
        keys: set[str] = set()
        for params, tools, reply, messages in conn.execute(
            "SELECT params, tools, reply, messages FROM requests WHERE session_id = ?",
            (session_id,),
        ).fetchall():
            keys.update(k for k in (params, tools, reply) if k is not None)
            keys.update(json.loads(messages))
        removed = conn.execute("DELETE FROM requests WHERE session_id = ?", (session_id,)).rowcount
        if keys:
            used = {
                r[0]
                for r in conn.execute(
                    """SELECT params FROM requests UNION SELECT tools FROM requests
                       UNION SELECT reply FROM requests
                       UNION SELECT j.value FROM requests, json_each(requests.messages) j"""
                )
            }
            conn.executemany("DELETE FROM parts WHERE hash = ?", [(k,) for k in keys - used])
        return int(removed)

    def _part(self, conn: db.Connection, key: str | None) -> Any:
        if key is None:
            return None
        row = conn.execute("SELECT body FROM parts WHERE hash = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def sessions(self) -> list[dict[str, Any]]:
        """Sessions with recorded requests, most recent first."""
        if not self.path.exists():
            return []
        with self._lock:
            rows = (
                self._connect()
                .execute(
                    "SELECT session_id, count(*), max(created_at) FROM requests "
                    "GROUP BY session_id ORDER BY max(id) DESC"
                )
                .fetchall()
            )
        return [{"session_id": r[0], "requests": r[1], "last": r[2]} for r in rows]

    def for_session(self, session_id: str) -> list[LoggedRequest]:
        """Every request of the session, oldest first, rebuilt."""
        if not self.path.exists():
            return []
        with self._lock:
            conn = self._connect()
            rows = conn.execute(
                """SELECT id, session_id, turn_id, created_at, params, tools, messages, reply,
                   prompt_tokens, cached_tokens, prefilled_tokens, prompt_ms, error
                   FROM requests WHERE session_id = ? ORDER BY id""",
                (session_id,),
            ).fetchall()
            out = []
            for r in rows:
                body = dict(self._part(conn, r[4]) or {})
                body["messages"] = [self._part(conn, k) for k in json.loads(r[6])]
                tools = self._part(conn, r[5])
                if tools:
                    body["tools"] = tools
                out.append(
                    LoggedRequest(
                        id=r[0],
                        session_id=r[1],
                        turn_id=r[2],
                        created_at=r[3],
                        body=body,
                        reply=self._part(conn, r[7]),
                        prompt_tokens=r[8],
                        cached_tokens=r[9],
                        prefilled_tokens=r[10],
                        prompt_ms=r[11],
                        error=r[12],
                    )
                )
            return out
