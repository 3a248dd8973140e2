"""The attachment store: files kept in the data folder under the SHA-256 of their bytes.

Layout: ``<data>/attachments/ab/abcdef…`` (the first two hex digits, then the whole digest; no
extension: the name and type a file came with live in the session log). Derived files (images
downscaled for a model) live beside them under ``derived/`` (``luna.attachments.images``).

Invariants:
- A file's name is the hash of its bytes: the same bytes are stored once, whoever sent them and
  however often, and a file whose bytes no longer match its name is damaged (``verify``).
- Writes are atomic and durable: a temporary file in the same folder, fsynced, renamed over
  the name, the folder fsynced. A reader never sees half a file, and once ``write`` returns the
  file survives a crash, so a message logged after it never refers to a file that is lost.
- A file's modification time is the last time it was taken in: ``write`` of bytes already
  stored touches the file. A file another message is about to refer to is thereby newer than
  the messages that referred to it before, which is how forgetting a session
  (``luna.memory.sessions``) tells a file it may delete from one being taken in again.
- A reference becomes a path only after it is checked to be 64 lower-case hex digits: nothing
  a sender chose (a name, a claimed type) ever names a file here.
- Blocking (file I/O, hashing): async callers use ``asyncio.to_thread``.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from luna.errors import AttachmentMissingError

FOLDER = "attachments"
DERIVED = "derived"
_HEX = re.compile(r"[0-9a-f]{64}")


def attachments_dir(data_dir: Path) -> Path:
    """Where a data folder keeps its attachments: ``<data>/attachments``."""
    return Path(data_dir) / FOLDER


def is_reference(sha256: str) -> bool:
    return bool(_HEX.fullmatch(sha256))


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_atomic(path: Path, data: bytes) -> None:
    """``data`` at ``path`` all at once and durably (temp file, fsync, rename, folder fsync)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


class AttachmentStore:
    """The content-addressed files of one data folder (blocking; see the module invariants)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, sha256: str) -> Path:
        if not is_reference(sha256):
            raise AttachmentMissingError(f"not an attachment reference: {sha256[:80]!r}")
        return self.root / sha256[:2] / sha256

    def write(self, data: bytes) -> str:
        """Store ``data`` (once: the same bytes already stored are left as they are, unless
        damaged); returns its reference, the hex SHA-256."""
        sha = digest(data)
        path = self.path(sha)
        try:
            if path.stat().st_size == len(data) and digest(path.read_bytes()) == sha:
                os.utime(path)  # taken in again now (module invariants)
                return sha
        except FileNotFoundError:
            pass
        write_atomic(path, data)
        return sha

    def read(self, sha256: str) -> bytes:
        """The stored bytes; AttachmentMissingError when gone or no longer matching the hash."""
        try:
            data = self.path(sha256).read_bytes()
        except FileNotFoundError:
            raise AttachmentMissingError(f"attachment {sha256[:12]} is missing") from None
        if digest(data) != sha256:
            raise AttachmentMissingError(f"attachment {sha256[:12]} is damaged")
        return data

    def has(self, sha256: str) -> bool:
        return is_reference(sha256) and self.path(sha256).is_file()

    def verify(self, sha256: str) -> str | None:
        """None when the file is there with the bytes its name promises, else what is wrong."""
        try:
            self.read(sha256)
        except AttachmentMissingError as e:
            return str(e)
        except OSError as e:
            return f"attachment {sha256[:12]} cannot be read: {e.strerror or e}"
        return None

    def taken_at(self, sha256: str) -> float | None:
        """When the file was last taken in (its mtime, epoch seconds); None when absent."""
        try:
            return self.path(sha256).stat().st_mtime
        except FileNotFoundError:
            return None

    def remove(self, hashes: Iterable[str]) -> int:
        """Delete these files and every derived copy of them; returns how many were stored."""
        removed = 0
        for sha in hashes:
            path = self.path(sha)
            if path.is_file():
                path.unlink()
                removed += 1
            derived = self.root / DERIVED
            if derived.is_dir():
                for copy in derived.glob(f"*/{sha[:2]}/{sha}.*"):
                    copy.unlink(missing_ok=True)
        return removed

    def hashes(self) -> Iterator[str]:
        """The reference of every stored file (derived copies and temporary files left out)."""
        if not self.root.is_dir():
            return
        for folder in sorted(self.root.iterdir()):
            if len(folder.name) != 2 or not folder.is_dir():
                continue
            for path in sorted(folder.iterdir()):
                if is_reference(path.name) and path.name.startswith(folder.name):
                    yield path.name

    def total_bytes(self) -> int:
        """The size of the whole folder, derived copies included."""
        if not self.root.is_dir():
            return 0
        return sum(p.stat().st_size for p in self.root.rglob("*") if p.is_file())
