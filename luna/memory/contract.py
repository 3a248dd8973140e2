"""The memory one turn uses: ``SessionMemory``, the seam between the agent and ``memory/``.

``luna.memory.Memory`` keeps it; the rest of its methods serve the librarian, the commands,
the web pages and ``luna doctor``, never the agent loop.

Invariants:
- ``append_message`` returns once the message is committed; the id it returns is the log's.
- Nothing here blocks the event loop: every method hands SQLite and embedding work off.
- ``prompt_history`` returns what was stored, as stored (repair is the agent's job).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from luna.memory.recall.search import RecallItem
    from luna.messages import Attachment, LoggedMessage, Usage

Head = dict[str, Any]  # a session's head as stored: {"tools": [...specs], "skills": "..."}


class SessionMemory(Protocol):
    """What the agent, its head and its image describer call on memory."""

    async def append_message(
        self,
        session_id: str,
        message: dict[str, Any],
        *,
        context: str | None = None,
        usage: Usage | None = None,
        scope: str = "owner",
    ) -> int:
        """Log one chat message (OpenAI shape); committed when this returns."""
        ...

    async def set_context(self, message_id: int, context: str) -> None:
        """Attach the per-turn context (recall) to a logged user message, once."""
        ...

    async def prompt_history(self, session_id: str) -> tuple[str | None, list[LoggedMessage]]:
        """(the session's summary or None, the messages after its compaction cut)."""
        ...

    async def recall(
        self,
        query: str,
        *,
        scope: str = "owner",
        session_id: str | None = None,
        k: int | None = None,
        now: dt.datetime | None = None,
    ) -> list[RecallItem]:
        """What ``scope`` may see that bears on ``query``, best first."""
        ...

    async def session_head(self, session_id: str) -> tuple[int, Head | None]:
        """(the session's compaction cut or 0, the head kept for that cut or None)."""
        ...

    async def save_session_head(self, session_id: str, cut: int, head: Head) -> Head:
        """Keep ``head`` for the cut unless one is kept; returns the one kept."""
        ...

    async def image_descriptions(self, hashes: Iterable[str]) -> dict[str, str]:
        """sha256 -> what the image shows, for the images already described."""
        ...

    async def undescribed_images(self, limit: int) -> list[Attachment]:
        """Images logged without a description yet, newest first (at most ``limit``)."""
        ...

    async def describe_image(self, sha256: str, text: str, model: str) -> None:
        """Store what an image shows."""
        ...
