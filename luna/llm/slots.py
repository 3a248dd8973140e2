"""Which llama-server slot a request goes to, so sessions keep their KV cache.

Measured (bench/slots.py, three interleaved sessions on the real server): letting the server
choose a slot by prompt similarity puts every session on the same slot, because all sessions
share a long head (system prompt and tool list) that makes any used slot "similar"; it prefills
as much again as a single slot does. Pinning each session to its own slot (``id_slot``) keeps
each one's cache, and background work (the librarian, output extraction, sub-agents) on a slot
of its own keeps it from evicting a conversation mid-turn.

Invariants:
- With fewer than two slots nothing is pinned (the server decides).
- The last slot is for background work; the others go to sessions, least recently used first.
  When there are more active sessions than slots, the least recently used session loses its
  slot, and the log says so (``slot_evicted``): raise ``-np`` or give the server a host-memory
  prompt cache (``--cache-ram``) to keep more.
- ``has_background_slot`` is the rule for whether background work on one server runs beside
  the sessions' caches (``ChatModel.leaves_sessions_alone`` applies it to the server a
  background call goes to; the image describer waits for quiet when it does not).
- Pure bookkeeping, no I/O; safe on the event loop.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

from luna.llm.server_info import ServerInfo
from luna.observe import log_event

log = logging.getLogger(__name__)


def has_background_slot(info: ServerInfo | None, pin_slots: bool) -> bool:
    """Whether background work on this llama-server gets a slot no session uses: two slots
    or more, and ``llm.pin_slots`` on. Otherwise (one slot, pinning off, or not a
    llama-server: unknown) a background request may take the slot a session's cache is in."""
    return info is not None and pin_slots and (info.total_slots or 0) >= 2


class SlotPlan:
    """Session -> slot, for a server with ``total`` slots."""

    def __init__(self, total: int) -> None:
        self.total = total
        self._owners: OrderedDict[str, int] = OrderedDict()  # lane -> slot, oldest first

    @property
    def background_slot(self) -> int | None:
        return self.total - 1 if self.total >= 2 else None

    def slot(self, lane: str | None) -> int | None:
        """The slot for a session (``lane``), or for background work when None."""
        if self.total < 2:
            return None
        if lane is None:
            return self.background_slot
        if lane in self._owners:
            self._owners.move_to_end(lane)
            return self._owners[lane]
        taken = set(self._owners.values())
        free = [s for s in range(self.total - 1) if s not in taken]
        if free:
            slot = free[0]
        else:
            evicted, slot = self._owners.popitem(last=False)
            log.info("slot %d of the LLM server goes from session %s to %s", slot, evicted, lane)
            log_event("slot_evicted", slot=slot, evicted=evicted, session=lane,
                      slots=self.total, reason="more active sessions than chat slots")  # fmt: skip
        self._owners[lane] = slot
        return slot
