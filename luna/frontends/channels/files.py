"""The files that came with a burst of messages, as uploads for the attachments intake.

Job: :func:`uploads_of` turns each :class:`IncomingFile` into an intake ``Upload``; the
channel hands them to ``Intake.take_all`` (``luna.attachments.intake``: stored by content
hash, sniffed, images downscaled for a model that sees, documents read), so a chat app's
files reach the model the way the REPL's, the web page's and the APIs' do.

Invariants:
- A file is downloaded only when the intake takes it, and never past the smaller of the
  intake's cap (``attachments.max_bytes``) and the app's (``<app>.max_attachment_bytes``):
  a file announced bigger is refused unread, and the download stops one byte past the cap
  (``IncomingFile.read_capped``).
- A failed or timed-out download is that file's refusal line (and a log line), never an
  exception: the rest of the message goes on, and so does the app.
- A voice note is kept like any file (kind "audio"); the user is told it cannot be
  transcribed yet (:func:`has_voice`, ``VOICE_NOTICE``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from luna.attachments.intake import Upload, display_name, too_big
from luna.errors import AttachmentError
from luna.frontends.channels.contract import ChannelError, IncomingFile
from luna.observe import log_event

log = logging.getLogger(__name__)

DOWNLOAD_TIMEOUT = 120.0  # seconds for one file's whole download (20 MB at ~170 KB/s)
VOICE_NOTICE = "I got your voice note, but I cannot transcribe voice notes yet; please type it."


def has_voice(files: Iterable[IncomingFile]) -> bool:
    return any(f.kind == "voice" for f in files)


def refusal_notice(refusals: Iterable[str]) -> str:
    """One line per file the intake did not take, for the user."""
    return "\n".join(f"Not taken: {line}" for line in refusals)


def upload_of(f: IncomingFile, app: str, app_cap: int) -> Upload:
    """``f`` as an upload, downloaded when the intake reads it (see the module invariants)."""

    async def read(limit: int) -> bytes:
        cap, key = limit, "attachments.max_bytes"
        if app_cap < limit:
            cap, key = app_cap, f"{app}.max_attachment_bytes"
        if f.size > cap:
            raise AttachmentError(too_big(f.size, cap, key))
        try:
            async with asyncio.timeout(DOWNLOAD_TIMEOUT):
                data = await (f.read_capped(cap) if f.read_capped is not None else f.read())
        except (ChannelError, TimeoutError) as e:
            status = e.status if isinstance(e, ChannelError) else None
            log.warning("%s: %s could not be downloaded: %s", app, display_name(f.name), e)
            log_event("channel_error", frontend=app, op="download", status=status,
                      error=type(e).__name__)  # fmt: skip
            raise AttachmentError(f"could not be downloaded from {app}") from None
        if len(data) > cap:  # read_capped gives one byte more: how much more is unknown
            raise AttachmentError(too_big(len(data) if len(data) > cap + 1 else None, cap, key))
        return data

    return Upload(f.name, read=read, declared_mime=f.declared_mime or "", size=f.size or None)


def uploads_of(files: Iterable[IncomingFile], app: str, app_cap: int) -> list[Upload]:
    return [upload_of(f, app, app_cap) for f in files]
