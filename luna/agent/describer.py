"""Descriptions of images, for recall: a model that can see says in words what each one shows.

"The photo of the receipt from last week" is found by words; an image has none. So each image a
session sees (a user's, or one a tool returned) gets a short description by the background
model, stored once per content hash with the messages that carry it (``Memory.describe_image``:
their search text, full-text and vectors, then names what the image shows). The librarian uses
the same descriptions when it compacts images away.

Invariants:
- Never on a turn's path: ``note`` only queues and returns, and the agent calls ``start`` once
  the turn has ended, so a description never races the reply for the server. One tracked
  task works through the queue, one image at a time, as background work (no session lane:
  llama-server's background slot when slots are pinned).
- Never at the cost of a session's KV cache: when background work shares a server and slot
  with the sessions (``ChatModel.leaves_sessions_alone``: a one-slot llama-server that
  also serves chat, or ``llm.pin_slots`` off), a description would take the slot a
  session's cache is in, and that session's next turn would prefill everything again.
  There the describer waits until no turn has run for ``attachments.describe_after_idle``
  seconds (the agent reports ``turn_started`` and ``turn_ended``); the first turn after
  that pays one prefill (unless llama-server's ``--cache-ram`` kept the session's prompt),
  once for everything described in that lull.
- Each image is described at most once: it is skipped when memory has its description, and
  an image whose description failed is not asked again in this run.
- Only a server that reports vision is asked; without one nothing is described (said once in
  the log), and text-only sessions still find the image by its name.
- ``aclose`` cancels the work; a description cut off by it is simply not stored.
- What a stop left undone is not lost: ``resume`` (at start) queues the logged images that
  have no description yet, newest first, at most ``MAX_QUEUED``, as if a turn had just ended
  (so a shared slot is still only used after ``describe_after_idle`` seconds of quiet).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable

from luna.agent.images import ImageSource, images_of
from luna.errors import LunaError
from luna.llm.contract import ChatModel
from luna.llm.vision import text_part
from luna.memory.contract import SessionMemory
from luna.messages import Attachment
from luna.observe import log_event

log = logging.getLogger(__name__)

DESCRIBE_PROMPT = (
    "Describe this image in one or two plain sentences for a search index: what it shows, and "
    "any text in it that matters (names, amounts, dates). No preamble."
)
MAX_DESCRIPTION_CHARS = 600
MAX_TOKENS = 1024  # room for a thinking model's reasoning before its two sentences
MAX_QUEUED = 256
DEFAULT_AFTER_IDLE = 300.0  # seconds without a turn before a shared slot is used


class ImageDescriber:
    """Describes images in the background; see the module docstring."""

    def __init__(
        self,
        llm: ChatModel,
        memory: SessionMemory,
        source: ImageSource,
        *,
        max_tokens: int = MAX_TOKENS,
        after_idle: float = DEFAULT_AFTER_IDLE,
    ) -> None:
        self.llm = llm  # the background role (LLMClient or RoleLLM)
        self.memory = memory
        self.source = source
        self.max_tokens = max_tokens
        self.after_idle = after_idle
        self._turns = 0  # running now
        self._last_turn_end = float("-inf")  # loop time
        self._turns_changed = asyncio.Event()
        self._said_deferred = False
        self._queue: dict[str, Attachment] = {}  # sha256 -> image, in arrival order
        self._seen: set[str] = set()  # noted in this run (described, queued or failed)
        self._task: asyncio.Task[None] | None = None
        self._said_blind = False

    def note(self, attachments: Iterable[Attachment]) -> None:
        """Queue the images not described yet; returns at once (``start`` describes them)."""
        for a in images_of(attachments):
            if a.sha256 not in self._seen and len(self._queue) < MAX_QUEUED:
                self._seen.add(a.sha256)
                self._queue[a.sha256] = a

    def resume(self) -> None:
        """Queue what an earlier run left undescribed, then describe it, in the background
        (the one tracked task); returns at once."""
        if self._task is None or self._task.done():
            self._last_turn_end = asyncio.get_running_loop().time()
            self._task = asyncio.create_task(self._resume(), name="image-describer")

    async def _resume(self) -> None:
        try:
            left = await self.memory.undescribed_images(MAX_QUEUED)
        except LunaError as e:
            log.warning("could not list the images left undescribed: %s", e)
            return
        self.note(left)
        if left:
            log_event("image_described", status="resumed", count=len(left))
        await self._work()

    def turn_started(self) -> None:
        self._turns += 1
        self._turns_changed.set()

    def turn_ended(self) -> None:
        """A turn is over (whatever its outcome): describe what is queued, now or once quiet."""
        self._turns = max(0, self._turns - 1)
        self._last_turn_end = asyncio.get_running_loop().time()
        self._turns_changed.set()
        self.start()

    def start(self) -> None:
        """Describe what is queued, in one background task; returns at once."""
        if self._queue and (self._task is None or self._task.done()):
            self._task = asyncio.create_task(self._work(), name="image-describer")

    async def wait_idle(self) -> None:
        while self._task is not None and not self._task.done():
            await asyncio.wait([self._task])

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _work(self) -> None:
        while self._queue:
            sha = next(iter(self._queue))
            image = self._queue.pop(sha)
            try:
                await self._describe(image)
            except LunaError as e:  # the server, the database: this image stays undescribed
                log.warning("could not describe image %s: %s", image.name or sha[:12], e)
                log_event("image_described", status="failed", error=type(e).__name__)

    async def _describe(self, image: Attachment) -> None:
        if image.sha256 in await self.memory.image_descriptions([image.sha256]):
            return
        if not await self.llm.can_see():
            if not self._said_blind:
                self._said_blind = True
                log.info("no vision model for background work: images are not described")
            return
        part = await self.source.image_part(image)
        if part is None:
            return
        await self._slot_free()
        messages = [{"role": "user", "content": [part, text_part(DESCRIBE_PROMPT)]}]
        response = await self.llm.chat(messages, max_tokens=self.max_tokens, temperature=0.0)
        text = " ".join(response.content.split())[:MAX_DESCRIPTION_CHARS]
        if not text:
            log_event("image_described", status="empty")
            return
        await self.memory.describe_image(image.sha256, text, response.model)
        log_event("image_described", status="ok", chars=len(text))

    async def _slot_free(self) -> None:
        """Return once a description cannot cost a session its cache (module docstring)."""
        if await self.llm.leaves_sessions_alone():
            return
        if self._quiet_in() <= 0:
            return
        if not self._said_deferred:
            self._said_deferred = True
            log.info(
                "the LLM server has no slot for background work (one slot, or llm.pin_slots "
                "off): images are described after %.0f s without a turn, and the next turn "
                "then prefills its session again",
                self.after_idle,
            )
        log_event("image_described", status="deferred", after_idle_s=self.after_idle)
        while (left := self._quiet_in()) > 0:
            self._turns_changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._turns_changed.wait(), None if self._turns else left)

    def _quiet_in(self) -> float:
        """Seconds until no turn will have run for ``after_idle`` (inf while one runs)."""
        if self._turns:
            return float("inf")
        return self._last_turn_end + self.after_idle - asyncio.get_running_loop().time()
