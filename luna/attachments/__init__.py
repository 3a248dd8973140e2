"""Attachments: files that come with a message, kept in the data folder by content hash.

Job: take a file's bytes from any front-end or tool, sniff what it is from the bytes, keep it
under ``<data>/attachments/ab/abcdef…`` (the sha256 of the bytes) and give back the
``luna.messages.Attachment`` that references it; give images back normalized (downscaled,
re-encoded, metadata stripped) for the model.

Invariants:
- A file is named by the hash of its bytes and written atomically (temp file, fsync, rename):
  a reader sees a whole file or none; the same bytes are stored once.
- The MIME type comes from the bytes' magic numbers, never from the name or the sender's claim.
- The same stored image always normalizes to the same bytes (``luna.attachments.images``), so
  every request repeats it byte for byte and llama-server's cache holds.
- Everything here blocks (file I/O, decoding): async callers use ``asyncio.to_thread``.
"""

from luna.attachments.images import ImageRefusedError
from luna.attachments.store import AttachmentRefusedError, AttachmentStore, sniff_mime

__all__ = ["AttachmentRefusedError", "AttachmentStore", "ImageRefusedError", "sniff_mime"]
