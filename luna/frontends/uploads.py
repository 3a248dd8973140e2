"""Front-ends' side of the attachments intake: files from a path, and files held for a message.

Invariants:
- A local file is read in a worker thread, at most the intake's cap plus one byte: a 40 GB
  file costs a read of the cap, never the whole file.
- ``PendingFiles`` holds what ``/attach`` picked until the next message takes them all, once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from luna.attachments.intake import Intake, Intaken, Upload
from luna.attachments.sizes import size_text
from luna.messages import Attachment


def read_head(path: Path, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of the file at ``path`` (blocking: call it in a thread)."""
    with path.open("rb") as f:
        return f.read(limit + 1)


def file_upload(path: Path) -> Upload:
    """A file on this machine as an upload, read only when the intake takes it."""

    async def read(limit: int) -> bytes:
        return await asyncio.to_thread(read_head, path, limit)

    return Upload(path.name, read=read, size=path.stat().st_size)


class PendingFiles:
    """Files picked for the next message (the REPL's ``/attach``)."""

    def __init__(self, intake: Intake | None) -> None:
        self.intake = intake
        self.uploads: list[Upload] = []

    def add(self, raw: str) -> str:
        """Hold the file at ``raw`` (a path; ``~`` expanded); one line saying what happened."""
        if self.intake is None:
            return "attachments are not available here"
        path = Path(raw.strip().strip("'\"")).expanduser()
        try:
            upload = file_upload(path)
        except OSError as e:
            return f"cannot attach {path}: {e.strerror or e}"
        if not path.is_file():
            return f"cannot attach {path}: not a file"
        self.uploads.append(upload)
        n = len(self.uploads)
        return (
            f"attached {path.name} ({size_text(upload.size or 0)}); it goes with your next "
            f"message ({n} file{'s' if n > 1 else ''} waiting, /attach to add more)"
        )

    async def take(self, text: str) -> tuple[str, tuple[Attachment, ...], list[str]]:
        """(message text, attachments, refusal lines) for the next message; empties the list."""
        uploads, self.uploads = self.uploads, []
        if not uploads or self.intake is None:
            return text, (), []
        got: Intaken = await self.intake.take_all(uploads, text)
        return got.message_text(text), tuple(got.attachments), got.refusals
