"""``/attach PATH`` for the terminal front-ends: a file from the disk into the attachment store.

Invariants:
- What the user gets back is one line: the file attached (name, sniffed type, size), or why
  not (unreadable, too large, not an image, corrupt); a refusal keeps nothing and loses
  nothing else (the next message is sent as typed, without it).
- The file is read, sniffed and normalized in a worker thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from luna.agent.images import size_text
from luna.attachments import AttachmentRefusedError, AttachmentStore
from luna.messages import Attachment

USAGE = "usage: /attach PATH (an image: PNG, JPEG, GIF, WebP or BMP)"


async def attach_path(store: AttachmentStore | None, arg: str) -> tuple[str, Attachment | None]:
    """``(line for the user, the stored attachment or None)`` for ``/attach arg``."""
    if not arg:
        return USAGE, None
    if store is None:
        return "attachments are not available here", None
    try:
        attachment = await asyncio.to_thread(lambda: store.put_path(Path(arg).expanduser()))
    except AttachmentRefusedError as e:
        return f"not attached: {e}", None
    line = (
        f"attached {attachment.name} ({attachment.mime}, {size_text(attachment.size)}): "
        "it goes with your next message"
    )
    return line, attachment
