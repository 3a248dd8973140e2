"""What a turn's model sees: whether its server takes images, and the image parts it gets.

Invariants:
- Images go to a server as parts only when that server (the session's, through the router)
  reports vision; otherwise ``luna.agent.images`` renders lines, and a session with images is
  told once per run, after the reply (shown and streamed, never stored), that the model
  cannot see them and how to enable it (``--mmproj``).
- Parts are fetched once per content hash per turn, through the image source, which returns
  the same bytes for the same hash (so every later request repeats them exactly); an image
  the source cannot give gets a text part saying so, never a wrong "cannot see" line.
- A turn without images asks nothing of the server or the source; each image a turn sees is
  handed to the describer (``luna.agent.describer``), which works in the background.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from luna.agent.describer import ImageDescriber
from luna.agent.images import ImageSource, images_of, unreadable_line
from luna.agent.prompt import as_sent
from luna.llm.contract import ChatModel
from luna.llm.vision import VISION_HINT, text_part
from luna.messages import AgentEvent, Attachment, TextDelta, ToolMedia

BLIND_NOTICE = "The model cannot see images, so it gets a line with each image's name instead."
MAX_TOLD = 256  # sessions remembered as told (a run with more tells some of them again)


@dataclass
class TurnSight:
    """One turn's view: whether its server sees, and the parts fetched so far (by sha256)."""

    can_see: bool = False
    parts: dict[str, dict[str, Any]] = field(default_factory=dict)
    notice: str = ""  # for the user, after the reply: the model cannot see their images

    def told(self, reply: str, emit: Callable[[AgentEvent], None]) -> str:
        """The reply as shown: with the notice after it, streamed too (never stored: the
        model does not need to read it)."""
        if not self.notice:
            return reply
        emit(TextDelta(f"\n\n{self.notice}"))
        return f"{reply.rstrip()}\n\n{self.notice}" if reply.strip() else self.notice


class Sight:
    """The agent's eyes: one per Agent, shared by its sessions."""

    def __init__(
        self, llm: ChatModel, source: ImageSource | None, describer: ImageDescriber | None = None
    ) -> None:
        self.llm = llm  # the chat role: LLMClient or RoleLLM (``can_see(lane=...)``)
        self.source = source
        self.describer = describer  # told of every image a turn sees
        self._told: set[str] = set()

    async def look(
        self,
        session_id: str,
        files: Iterable[Attachment],
        emit: Callable[[AgentEvent], None],
        seen: TurnSight | None = None,
    ) -> TurnSight:
        """``seen`` (or a new view) with the parts of ``files``' images added."""
        sight = seen or TurnSight()
        images = [a for a in images_of(files) if a.sha256 not in sight.parts]
        if not images:
            return sight
        if self.describer is not None:
            self.describer.note(images)
        sight.can_see = await self.llm.can_see(lane=session_id)
        if not sight.can_see:
            if session_id not in self._told:
                self._remember_told(session_id)
                sight.notice = f"({BLIND_NOTICE} To enable it: {VISION_HINT}.)"
            return sight
        for a in images:
            if a.sha256 not in sight.parts:
                part = await self.source.image_part(a) if self.source is not None else None
                sight.parts[a.sha256] = part or text_part(unreadable_line(a))
        return sight

    async def keep(self, media: ToolMedia, name: str) -> Attachment | None:
        """Store an image a tool returned (None without a source, or when it is no image)."""
        return await self.source.keep(media, name) if self.source is not None else None

    async def results(
        self,
        results: list[dict[str, Any]],
        sight: TurnSight,
        session_id: str,
        emit: Callable[[AgentEvent], None],
    ) -> list[dict[str, Any]]:
        """Logged tool results as the model gets them (their images as in later requests)."""
        files = [Attachment.from_json(a) for m in results for a in m.get("attachments") or []]
        await self.look(session_id, files, emit, sight)
        return [as_sent(m, sight.parts) for m in results]

    def resume(self) -> None:
        """Describe, in the background, the images an earlier run left undescribed."""
        if self.describer is not None:
            self.describer.resume()

    def turn_started(self) -> None:
        if self.describer is not None:
            self.describer.turn_started()

    def turn_ended(self) -> None:
        """A turn is over: the images it saw may be described now (never during it)."""
        if self.describer is not None:
            self.describer.turn_ended()

    async def aclose(self) -> None:
        if self.describer is not None:
            await self.describer.aclose()

    def _remember_told(self, session_id: str) -> None:
        if len(self._told) >= MAX_TOLD:
            self._told.pop()
        self._told.add(session_id)
