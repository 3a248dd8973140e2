"""The attachment store: files in ``<data>/attachments`` by content hash, images normalized.

Layout: ``<data>/attachments/ab/abcdef…`` holds the bytes as they came (``ab`` the first two
hex digits of their sha256); ``<data>/attachments/normalized/ab/abcdef….<side>.png|jpg`` caches
what the model gets for an image at one longest side (``luna.attachments.images``), so a
restart reads it again instead of decoding the original.

Invariants:
- Every file is written atomically: a temp file in the same folder, fsync, rename, then an
  fsync of the folder. A reader sees a whole file or none; the same bytes are stored once.
- ``mime`` is sniffed from the magic numbers (PNG, JPEG, GIF, WebP, BMP), never the name.
- ``put`` refuses (``AttachmentRefusedError``, a line for the user) what is too large, not an
  image, corrupt, or a decompression bomb; nothing refused is left in the folder.
- ``load`` and ``save`` are what ``luna.agent.image_parts.StoredImages`` expects; they never
  raise for a bad or missing file (None, logged).
- Blocking: async callers use ``asyncio.to_thread``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from luna.attachments.images import (
    DEFAULT_MAX_PIXELS,
    DEFAULT_MAX_SIDE,
    ImageRefusedError,
    normalize,
)
from luna.errors import LunaError
from luna.messages import Attachment

if TYPE_CHECKING:
    from luna.config import Config

log = logging.getLogger(__name__)

FOLDER = "attachments"
NORMALIZED = "normalized"
DEFAULT_MAX_BYTES = 20 * 1024 * 1024

_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"BM", "image/bmp"),
)


class AttachmentRefusedError(LunaError):
    """A file the store will not keep; the text is one line for the user."""


def sniff_mime(data: bytes) -> str | None:
    """The image MIME type the bytes' magic numbers say, or None (not an image we take)."""
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    return None


def attachments_dir(data_dir: Path) -> Path:
    """``<data>/attachments``: next to the database."""
    return Path(data_dir) / FOLDER


class AttachmentStore:
    """Files by content hash under ``root``; see the module docstring."""

    def __init__(
        self,
        root: Path,
        max_side: int = DEFAULT_MAX_SIDE,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_pixels: int = DEFAULT_MAX_PIXELS,
    ) -> None:
        self.root = Path(root)
        self.max_side = max_side
        self.max_bytes = max_bytes
        self.max_pixels = max_pixels

    @classmethod
    def for_config(cls, cfg: Config) -> AttachmentStore:
        """The store of ``cfg``'s data folder, with its ``[attachments]`` limits."""
        return cls(
            attachments_dir(cfg.data_dir),
            max_side=cfg.attachments.image_max_side,
            max_bytes=int(cfg.attachments.max_file_mb * 1024 * 1024),
        )

    def path_of(self, sha256: str) -> Path:
        return self.root / sha256[:2] / sha256

    def normalized_path(self, sha256: str, mime: str) -> Path:
        ext = "jpg" if mime == "image/jpeg" else "png"
        return self.root / NORMALIZED / sha256[:2] / f"{sha256}.{self.max_side}.{ext}"

    def put(self, data: bytes, name: str) -> Attachment:
        """Keep ``data`` (an image) and return its Attachment; AttachmentRefusedError if not."""
        label = name or "file"
        if len(data) > self.max_bytes:
            raise AttachmentRefusedError(
                f"{label} refused: it is more than the "
                f"{self.max_bytes / 1048576:.0f} MB limit (attachments.max_file_mb)"
            )
        mime = sniff_mime(data)
        if mime is None:
            raise AttachmentRefusedError(f"{label} refused: its bytes are not an image")
        try:
            normal_mime, normal = normalize(data, self.max_side, self.max_pixels)
        except ImageRefusedError as e:
            raise AttachmentRefusedError(f"{label}: {e}") from e
        sha = hashlib.sha256(data).hexdigest()
        write_once(self.path_of(sha), data)
        write_once(self.normalized_path(sha, normal_mime), normal)
        return Attachment("image", mime, name, len(data), sha)

    def put_path(self, path: Path) -> Attachment:
        """``put`` the file at ``path`` (a front-end's ``/attach``), named by its file name;
        AttachmentRefusedError when it cannot be read, is too large or is not an image."""
        try:
            with path.open("rb") as f:
                if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                    raise AttachmentRefusedError(f"{path} refused: not a regular file")
                data = f.read(self.max_bytes + 1)
        except OSError as e:
            raise AttachmentRefusedError(f"cannot read {path}: {e.strerror or e}") from e
        return self.put(data, path.name)

    def save(self, data: bytes, declared_mime: str, name: str) -> Attachment | None:
        """``put`` for ``StoredImages``: None (logged) when refused. ``declared_mime`` is
        only logged: the bytes say what they are."""
        try:
            return self.put(data, name)
        except AttachmentRefusedError as e:
            log.warning("attachment refused (declared %s): %s", declared_mime, e)
            return None

    def load(self, attachment: Attachment) -> tuple[str, bytes] | None:
        """``(mime, normalized bytes)`` of a stored image, or None when gone or unreadable."""
        sha = attachment.sha256
        for mime in ("image/png", "image/jpeg"):
            cached = self.normalized_path(sha, mime)
            if cached.is_file():
                return mime, cached.read_bytes()
        try:
            data = self.path_of(sha).read_bytes()
        except OSError:
            log.warning("attachment %s: its file is gone", sha[:12])
            return None
        try:
            mime, normal = normalize(data, self.max_side, self.max_pixels)
        except ImageRefusedError as e:
            log.warning("attachment %s: %s", sha[:12], e)
            return None
        write_once(self.normalized_path(sha, mime), normal)
        return mime, normal


def write_once(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically, unless a file is already there (same hash)."""
    if path.is_file():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:16]}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
