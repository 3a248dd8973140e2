"""Messages the database could not take yet: kept in a file beside it, written when it can.

Why: a message Luna has accepted is never lost. When its write fails because another program
holds the database's write lock past ``memory.lock_wait``, or because the database is damaged,
the message is appended here and the person is told it is kept.

Invariants:
- The file is ``<data>/held_messages.jsonl``: one JSON object per held message (session,
  scope, the message, its context, the UTC time it was given, and a unique ``hold_id``),
  appended and fsynced before the caller is answered, so it survives ``kill -9`` and power loss.
- Held messages are written to the session log in the order they were held, with the time they
  were given, and before any later message (``Memory.append_message`` writes them first).
- One flush writes every held message in one transaction that also records the last
  ``hold_id`` in ``meta``; the file goes after that commit. A crash in between leaves the file
  and the next flush skips what ``meta`` says was written: each held message lands once.
- A flush of a file written by a run that crashed happens at the next ``Memory.open``.
- Blocking (file and SQLite work); the ``Memory`` facade calls it in a worker thread. A lock
  keeps one flush or hold at a time.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import uuid
from pathlib import Path
from typing import Any

from luna.memory.storage import session_log
from luna.memory.storage.store import Store, now_iso
from luna.messages import clean_value
from luna.observe import log_event

log = logging.getLogger(__name__)

META_KEY = "held_written"  # hold_id of the last held message written to the log


class HeldMessages:
    """The held-messages file of one database (see the module invariants)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    @property
    def pending(self) -> bool:
        return self.path.exists()

    def hold(
        self,
        session_id: str,
        message: dict[str, Any],
        *,
        context: str | None,
        scope: str,
        created: str | None = None,
    ) -> None:
        """Append one message, durably, before the caller answers the person."""
        record = {
            "hold_id": uuid.uuid4().hex,
            "session_id": session_id,
            "scope": scope,
            "created_at": created or now_iso(),
            "context": context,
            "message": _plain(clean_value(message)),
        }
        line = json.dumps(record, ensure_ascii=False) + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                os.write(fd, line.encode())
                os.fsync(fd)
            finally:
                os.close(fd)
        log_event("memory_op", op="held", count=1)

    def flush(self, store: Store) -> int:
        """Write every held message to the log in one transaction; returns how many were.

        Raises what the store raises (DatabaseBusyError, DatabaseCorruptError) and keeps the
        file then."""
        with self._lock:
            records = self._read()
            if not records:
                self.path.unlink(missing_ok=True)
                return 0
            with store.transaction() as conn:
                # Read under the write lock: another process flushing the same file at the
                # same time then sees what this one wrote.
                row = conn.execute("SELECT value FROM meta WHERE key = ?", (META_KEY,)).fetchone()
                ids = [r["hold_id"] for r in records]
                if row is not None and row[0] in ids:  # written already (a crash, or another)
                    records = records[ids.index(row[0]) + 1 :]
                for r in records:
                    session_log.insert_message(
                        store,
                        conn,
                        r["session_id"],
                        r["message"],
                        context=r.get("context"),
                        scope=r.get("scope") or "owner",
                        created=r.get("created_at"),
                    )
                if records:
                    conn.execute(
                        "INSERT INTO meta (key, value) VALUES (?, ?) "
                        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                        (META_KEY, records[-1]["hold_id"]),
                    )
            self.path.unlink(missing_ok=True)
        if records:
            log.warning("memory: %d held message(s) written to the log", len(records))
            log_event("memory_op", op="held_written", count=len(records))
        return len(records)

    def records(self) -> list[dict[str, Any]]:
        """The held messages, oldest first (some may be written already: see ``flush``)."""
        with self._lock:
            return self._read()

    def _read(self) -> list[dict[str, Any]]:
        try:
            lines = self.path.read_bytes().split(b"\n")
        except FileNotFoundError:
            return []
        records = []
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
                message = record.get("message") if isinstance(record, dict) else None
                if (
                    isinstance(message, dict)
                    and message.get("role") in session_log.ROLES
                    and isinstance(record.get("session_id"), str)
                    and isinstance(record.get("hold_id"), str)
                ):
                    records.append(record)
                    continue
            except ValueError:
                pass
            # A torn last line (power lost mid-append: never acknowledged), or an edit by hand.
            log.warning("memory: %s:%d is not a held message; left out", self.path, number)
        return records


def _plain(message: dict[str, Any]) -> dict[str, Any]:
    """The message as JSON data (tool calls may be objects with ``to_wire``)."""
    out = dict(message)
    calls = out.get("tool_calls")
    if calls:
        out["tool_calls"] = [
            c.to_wire() if callable(getattr(c, "to_wire", None)) else dict(c) for c in calls
        ]
    return out
