"""The ``view_image`` tool: show the model an image file from the workspace.

Invariants:
- The same path rules as ``read_file`` (``files.PathPolicy``: resolved first, confined to the
  readable roots, Luna's private files never, the open descriptor checked again).
- Only a regular file of at most ``MAX_IMAGE_BYTES`` whose bytes are PNG, JPEG, GIF or WebP is
  returned, as a ``ToolResult`` image; the agent stores and normalizes it, and a model that
  can see gets it in the tool's message, a text-only one a line naming it. Anything else is a
  readable refusal (an SVG is text: read it with read_file).
- File work runs in a thread.
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

from luna.config import Config
from luna.errors import ToolError
from luna.messages import ToolMedia, ToolResult
from luna.tools.builtin.files import PathPolicy, _base
from luna.tools.registry import ToolContext, ToolRegistry

MAX_IMAGE_BYTES = 20 * 1024 * 1024
SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def image_mime(head: bytes) -> str | None:
    """The image type the first bytes declare, or None (WebP: RIFF....WEBP)."""
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return next((mime for magic, mime in SIGNATURES if head.startswith(magic)), None)


def _load(policy: PathPolicy, path: Path) -> ToolResult:
    policy.check(path, write=False)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ToolError(f"{path} does not exist") from None
    except OSError as e:
        raise ToolError(f"cannot open {path}: {e.strerror}") from e
    with os.fdopen(fd, "rb") as f:
        policy.check_fd(f.fileno(), write=False)
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ToolError(f"{path} is not a regular file")
        if st.st_size > MAX_IMAGE_BYTES:
            limit = MAX_IMAGE_BYTES // (1024 * 1024)
            raise ToolError(f"{path} is {st.st_size} bytes; images over {limit} MB are not shown")
        data = f.read(MAX_IMAGE_BYTES + 1)
    mime = image_mime(data[:16])
    if mime is None:
        if b"<svg" in data[:1024].lower():
            raise ToolError(f"{path} is an SVG (text, not rendered here); read it with read_file")
        raise ToolError(f"{path} is not a PNG, JPEG, GIF or WebP image")
    content = f"{path.name}: {mime}, {len(data)} bytes"
    return ToolResult(content, media=(ToolMedia("image", mime, data),))


def register(reg: ToolRegistry, cfg: Config) -> None:
    policy = PathPolicy(cfg)

    @reg.tool(level="allow")
    async def view_image(path: str, *, ctx: ToolContext) -> ToolResult:
        """Look at an image file (PNG, JPEG, GIF, WebP) from the workspace.

        Args:
            path: Image path, relative to the workspace or absolute.
        """
        p = policy.resolve(path, _base(ctx, policy))
        return await asyncio.to_thread(_load, policy, p)
