"""The threads Luna follows: in a group, a thread she answered in is hers to follow, so a
follow-up there addresses her without a mention (Matrix ``m.thread``, Discord threads).

Job: :class:`Following` says whether a thread's session is followed. It is derived from the
session log, not kept apart: a thread is followed once its session holds one of Luna's
answers, so following survives a restart (and a forgotten session is followed no more once
Luna restarts). A thread admitted but not answered yet is followed from :meth:`follow`, in
memory, so a follow-up sent while the first answer is still being written is heard too.

Invariants:
- The key is the thread's session id (an app's thread is a session of its own).
- SQLite is read in a worker thread, never on the event loop; a positive answer is
  remembered (at most ``MAX_REMEMBERED`` threads) so a busy thread costs one lookup; a
  negative one is asked again (it changes when Luna answers).
- A remembered thread is answered without yielding to the loop. Lookups run one at a time,
  in the order they were asked: an app that handles each message in a task of its own
  (Discord) hands its messages on in the order they came.
"""

from __future__ import annotations

import asyncio

from luna.memory.storage import session_log
from luna.memory.storage.store import Store

MAX_REMEMBERED = 4096


class Following:
    """The threads one app account follows, as its sessions."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._known: dict[str, None] = {}  # insertion order: the oldest goes first
        self._lookup = asyncio.Lock()  # FIFO: lookups answer in the order they were asked

    def follow(self, session_id: str) -> None:
        """A message in this thread was admitted: follow it from now on."""
        self._known.pop(session_id, None)
        self._known[session_id] = None
        while len(self._known) > MAX_REMEMBERED:
            self._known.pop(next(iter(self._known)))

    async def follows(self, session_id: str) -> bool:
        """Whether the thread is followed: admitted here before, or answered in (the log)."""
        if session_id in self._known:
            return True
        async with self._lookup:
            if session_id in self._known:  # found by the lookup before this one
                return True
            if await asyncio.to_thread(session_log.has_answered, self.store, session_id):
                self.follow(session_id)
                return True
            return False
