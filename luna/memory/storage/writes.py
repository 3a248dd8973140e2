"""Writes that wait for another program's lock, and the messages held when they cannot land.

Invariants:
- :meth:`WriteGate.run` waits for another program's write lock with bounded backoff: tries of
  at most ``TRY_WAIT_S`` (SQLite's own busy wait), pauses doubling from ``PAUSE_S`` to
  ``PAUSE_MAX_S`` between them, ``memory.lock_wait`` seconds in all, then DatabaseBusyError.
  Between tries the store's lock is free, so reads of this process go on meanwhile.
- :meth:`WriteGate.append` never loses a message: when it cannot be written (busy past the
  wait, or the database is damaged) it is held (:mod:`luna.memory.storage.held`) and the error says
  where it is kept. Held messages are written before any later message, and by a background
  retry every ``HELD_RETRY_S`` until they are; a damaged database stops the retry (the file
  waits for the repair, then the next open writes it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from luna.errors import DatabaseBusyError, DatabaseCorruptError, MemoryStoreError
from luna.memory.storage import session_log
from luna.memory.storage.held import HeldMessages
from luna.memory.storage.store import Store, now_iso
from luna.messages import Usage
from luna.observe import log_event

log = logging.getLogger(__name__)

TRY_WAIT_S = 0.5
PAUSE_S, PAUSE_MAX_S = 0.1, 2.0
HELD_RETRY_S = 2.0


class WriteGate:
    """The write path of one ``Memory``: bounded waits, held messages, their retry."""

    def __init__(self, lock_wait: float, held: HeldMessages) -> None:
        self.lock_wait = lock_wait
        self.held = held
        self._retrying: asyncio.Task[None] | None = None

    async def run(self, store: Store, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` in a worker thread, waiting for the lock (see above)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.lock_wait
        pause = PAUSE_S
        while True:
            wait = max(0.001, min(TRY_WAIT_S, deadline - loop.time()))
            try:
                return await asyncio.to_thread(store.waiting, wait, fn, *args, **kwargs)
            except DatabaseBusyError as exc:
                left = deadline - loop.time()
                if left <= 0:
                    log_event("memory_op", op="busy", duration_ms=self.lock_wait * 1000)
                    raise DatabaseBusyError(
                        f"another program has held the database's write lock for over "
                        f"{self.lock_wait:g} s ({store.path})"
                    ) from exc
                await asyncio.sleep(min(pause, left))
                pause = min(pause * 2, PAUSE_MAX_S)

    async def append(
        self,
        store: Store,
        session_id: str,
        message: dict[str, Any],
        *,
        context: str | None,
        usage: Usage | None,
        scope: str,
    ) -> int:
        """Log one message (held ones first); hold it when the database cannot take it."""
        created = now_iso()
        try:
            if self.held.pending:
                try:
                    await self.run(store, self.held.flush, store)
                except (DatabaseBusyError, DatabaseCorruptError):
                    raise
                except MemoryStoreError as exc:  # never let the file block every later write
                    log.error("memory: held messages not written: %s", exc)
            return await self.run(
                store,
                session_log.append_message,
                store,
                session_id,
                message,
                context=context,
                usage=usage,
                scope=scope,
                created=created,
            )
        except (DatabaseBusyError, DatabaseCorruptError) as exc:
            await asyncio.to_thread(
                self.held.hold, session_id, message, context=context, scope=scope, created=created
            )
            self.retry_held(store)
            until = "as soon as the lock frees" if isinstance(exc, DatabaseBusyError) else (
                "once the database is repaired"
            )  # fmt: skip
            raise type(exc)(
                f"{exc} — the message is kept ({self.held.path}) and saved {until}"
            ) from exc

    def retry_held(self, store: Store) -> None:
        """Try the held messages in the background until they are written."""
        if self._retrying is None or self._retrying.done():
            self._retrying = asyncio.create_task(self._retry(store), name="memory-held")

    async def _retry(self, store: Store) -> None:
        while self.held.pending:
            try:
                await asyncio.to_thread(store.waiting, TRY_WAIT_S, self.held.flush, store)
            except DatabaseBusyError:
                await asyncio.sleep(HELD_RETRY_S)
            except DatabaseCorruptError:
                return  # kept in the file; the next open of a repaired database writes it
            except MemoryStoreError as exc:
                log.warning("memory: held messages not written yet: %s", exc)
                await asyncio.sleep(HELD_RETRY_S)

    async def close(self, store: Store | None) -> None:
        """Stop the retry; one last short try, else the file waits for the next open."""
        if self._retrying is None:
            return
        self._retrying.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._retrying
        self._retrying = None
        if store is not None and self.held.pending:
            with contextlib.suppress(DatabaseBusyError, DatabaseCorruptError):
                await asyncio.to_thread(store.waiting, TRY_WAIT_S, self.held.flush, store)
