"""Forgetting a session, files and all, and sweeping the files no message refers to.

Job: the one door the CLI (``luna sessions``), the REPL and the web API use to forget a
session. It joins the database's part (:mod:`luna.memory.storage.forget`, one transaction), the
attachment files (:mod:`luna.attachments.store`), the held messages and the request log.

Invariants:
- Nothing blocking on the event loop: SQLite, file and request-log work run in worker threads.
- Refused (SessionInUseError) while a message of the session waits in the held-messages file:
  it would bring the session back once written.
- A file goes only after the commit that removed its last reference, and only when no message
  and no held message refers to it and it was not taken in again since the last forgotten
  message that carried it (``AttachmentStore.taken_at``): content-hash storage is shared, so
  a file another session uses, or is about to, stays. A crash between the commit and the
  removal leaves files no message refers to; :func:`sweep` removes those.
- :func:`sweep` removes a file no message or held message refers to only once it has not been
  taken in for ``SWEEP_AFTER`` (a file is stored before the message that refers to it is
  logged, and that message may wait for its session's turn).
- A saved large output (``tools.outputs_dir``: a tool's result or a document's text) that
  the session's messages named goes by the same rule: no other message or held message names
  it, and it was not saved again since (``tools/output.py`` touches a file it saves again).
- The request log (``requests.db``) loses the session's requests after the main commit; when
  it cannot be changed the outcome says so (``requests_error``), never silently.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from luna.attachments.store import AttachmentStore, attachments_dir
from luna.errors import MemoryStoreError, SessionInUseError
from luna.memory.storage import forget as forget_rows
from luna.memory.storage.forget import Footprint, Forgotten
from luna.memory.storage.request_log import RequestLog
from luna.messages import Attachment
from luna.observe import log_event

if TYPE_CHECKING:
    from luna.memory import Memory

SWEEP_AFTER = 86_400.0  # seconds: a file no message refers to yet may be one on its way in
TIME_SLACK = 0.002  # seconds: a message's time is kept to the millisecond, a file's finer

__all__ = ["SWEEP_AFTER", "Footprint", "Outcome", "footprint", "forget_session", "sweep"]


@dataclass(frozen=True)
class Outcome:
    """What forgetting a session did."""

    rows: Forgotten
    files_removed: int
    files_kept: int  # still used by another session, or on their way into one
    outputs_removed: int  # saved large outputs (tools.outputs_dir)
    requests: int  # records removed from the request log
    requests_error: str = ""


async def footprint(memory: Memory, session_id: str) -> Footprint | None:
    """What forgetting ``session_id`` would remove; None when nothing has that id."""
    return await asyncio.to_thread(forget_rows.footprint, memory.store, session_id)


async def forget_session(
    memory: Memory,
    session_id: str,
    *,
    keep_memories: bool = False,
    turn_may_run: bool = False,
    turn_timeout: float = 1800.0,
    outputs_dir: Path | None = None,
) -> Outcome:
    """Forget the session: its rows in one transaction, then its unused files and its
    requests. ``turn_may_run``: another process (a running Luna) may be in one of its turns
    (see :mod:`luna.memory.storage.forget`); in-process callers hold the session's lock.
    ``outputs_dir``: ``tools.outputs_dir``, whose files its messages may name."""
    held = await asyncio.to_thread(memory.writes.held.records)
    if any(r.get("session_id") == session_id for r in held):
        raise SessionInUseError(
            f"session {session_id!r} has messages waiting to be written (the database was "
            "busy); Luna writes them when it can: forget it after that"
        )
    rows: Forgotten = await memory.writes.run(
        memory.store,
        forget_rows.forget_session,
        memory.store,
        session_id,
        keep_memories=keep_memories,
        turn_may_run=turn_may_run,
        turn_timeout=turn_timeout,
        outputs=str(outputs_dir) if outputs_dir is not None else None,
    )
    removed, kept = await asyncio.to_thread(_remove_unused, memory, rows.unused)
    outputs = 0
    if outputs_dir is not None and rows.unused_outputs:
        outputs = await asyncio.to_thread(
            _remove_outputs, memory, Path(outputs_dir), rows.unused_outputs
        )
    requests, error = 0, ""
    try:
        log = RequestLog.beside(memory.cfg.db_path)
        try:
            requests = await asyncio.to_thread(log.forget_session, session_id)
        finally:
            await asyncio.to_thread(log.close)
    except MemoryStoreError as e:
        error = str(e)
    log_event(
        "memory_op",
        op="forget_session",
        count=rows.messages,
        memories=rows.memories,
        files_removed=removed,
        files_kept=kept + rows.shared,
        outputs=outputs,
        requests=requests,
    )
    return Outcome(rows, removed, kept + rows.shared, outputs, requests, error)


def _store(memory: Memory) -> AttachmentStore:
    return AttachmentStore(attachments_dir(memory.cfg.db_path.parent))


def _held_files(memory: Memory) -> set[str]:
    """The files the held messages (not yet in the log) refer to."""
    out = set()
    for record in memory.writes.held.records():
        for a in record["message"].get("attachments") or []:
            try:
                out.add(Attachment.from_json(a).sha256)
            except (KeyError, TypeError, ValueError):
                continue
    return out


def _referenced(memory: Memory, hashes: list[str]) -> set[str]:
    found: set[str] = set()
    for i in range(0, len(hashes), 500):
        part = hashes[i : i + 500]
        marks = ",".join("?" * len(part))
        rows = memory.store.query(
            f"SELECT DISTINCT sha256 FROM message_attachments WHERE sha256 IN ({marks})", part
        )
        found.update(str(r[0]) for r in rows)
    return found


def _remove_unused(memory: Memory, unused: dict[str, str]) -> tuple[int, int]:
    """Remove the forgotten session's files nobody uses (module invariants); (removed, kept)."""
    if not unused:
        return 0, 0
    store = _store(memory)
    busy = _held_files(memory) | _referenced(memory, sorted(unused))
    gone, kept = [], 0
    for sha, last in unused.items():
        taken = store.taken_at(sha)
        if taken is None:
            continue  # gone already (`luna doctor` says so)
        if sha in busy or taken > _epoch(last) + TIME_SLACK:
            kept += 1
            continue
        gone.append(sha)
    return store.remove(gone), kept


def _remove_outputs(memory: Memory, folder: Path, unused: dict[str, str]) -> int:
    """Remove the saved outputs only the forgotten session named (module invariants)."""
    held = [str(r["message"].get("content") or "") for r in memory.writes.held.records()]
    removed = 0
    for name, last in unused.items():
        path = folder / name
        if any(str(path) in text for text in held):
            continue
        try:
            if not path.is_file() or path.stat().st_mtime > _epoch(last) + TIME_SLACK:
                continue
            path.unlink()
        except OSError:
            continue
        removed += 1
    return removed


def _epoch(iso: str) -> float:
    when = dt.datetime.fromisoformat(iso)
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


async def sweep(memory: Memory, *, older_than: float = SWEEP_AFTER) -> tuple[int, int]:
    """Remove the files no message (nor held message) refers to that were last taken in more
    than ``older_than`` seconds ago; returns (removed, left because they are newer)."""
    return await asyncio.to_thread(_sweep, memory, older_than)


def _sweep(memory: Memory, older_than: float) -> tuple[int, int]:
    store = _store(memory)
    stored = sorted(store.hashes())
    loose = set(stored) - _referenced(memory, stored) - _held_files(memory)
    cutoff = time.time() - older_than
    taken = {sha: store.taken_at(sha) for sha in sorted(loose)}
    old = [sha for sha, at in taken.items() if at is not None and at < cutoff]
    removed = store.remove(old)
    log_event("memory_op", op="sweep_files", count=removed, newer=len(loose) - len(old))
    return removed, len(loose) - len(old)


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def footprint_text(seen: Footprint) -> str:
    """What a forget would remove, in one line (the question before it)."""
    when = ""
    if seen.first_at and seen.last_at:
        when = f", {seen.first_at[:10]} to {seen.last_at[:10]}"
    text = (
        f"session {seen.session_id}: {_count(seen.messages, 'message')}{when}, "
        f"{_count(seen.files, 'file')}, {_count(seen.memories, 'memory', 'memories')} learned in it"
    )
    if seen.tasks:
        text += (
            f" ({_count(seen.tasks, 'scheduled task')} made in it will go on: `luna schedule list`)"
        )
    return text


def outcome_text(outcome: Outcome) -> str:
    """What a forget did, in one line (plus a second when the request log was not changed)."""
    rows = outcome.rows
    parts = [_count(rows.messages, "message"), _count(rows.memories, "memory", "memories")]
    if rows.summaries:
        parts.append("its summary")
    parts.append(f"{_count(outcome.files_removed, 'file')} removed")
    if outcome.outputs_removed:
        parts.append(f"{_count(outcome.outputs_removed, 'saved output')} removed")
    if outcome.files_kept:
        parts.append(f"{_count(outcome.files_kept, 'file')} kept (still in use)")
    parts.append(f"{_count(outcome.requests, 'request')} from the request log")
    text = f"forgot session {rows.session_id}: {', '.join(parts)}"
    if outcome.requests_error:
        text += f"\nwarning: {outcome.requests_error}; its requests are still there"
    return text
