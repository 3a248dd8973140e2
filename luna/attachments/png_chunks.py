"""PNG files with a damaged ancillary chunk, read the way libpng reads them.

libpng (so browsers too) warns about an ancillary chunk whose checksum is wrong and drops it,
and llama.cpp's image loader checks no checksum at all; Pillow refuses the whole file. Real
servers send such files: server-everything's own ``get-tiny-image`` has a wrong checksum in
its colour profile (iCCP). Luna drops every ancillary chunk anyway when it normalizes an image
(``luna.attachments.images``), so it drops a damaged one first.

Invariants:
- Only ancillary chunks (first letter lower case: colour profiles, text, EXIF, physical size)
  whose CRC is wrong are left out. Critical chunks (IHDR, PLTE, IDAT, IEND) are never touched:
  what Pillow makes of damage there is unchanged.
- Bytes that are not a PNG, a PNG whose chunk lengths run past its end, and a PNG with
  nothing damaged come back unchanged (the same object).
- Pure, no I/O; one pass over the chunks, checksums computed for ancillary chunks only.
"""

from __future__ import annotations

import struct
import zlib

SIGNATURE = b"\x89PNG\r\n\x1a\n"
ANCILLARY = 0x20  # bit 5 of a chunk type's first byte: a lower-case letter


def without_damaged_ancillary_chunks(data: bytes) -> bytes:
    """``data`` minus its ancillary chunks whose checksum is wrong (see the invariants)."""
    if not data.startswith(SIGNATURE):
        return data
    kept = [SIGNATURE]
    dropped = False
    at = len(SIGNATURE)
    while at + 12 <= len(data):
        (length,) = struct.unpack_from(">I", data, at)
        end = at + 12 + length
        if end > len(data):
            return data  # truncated: Pillow says so
        kind = data[at + 4 : at + 8]
        if kind[0] & ANCILLARY:
            (crc,) = struct.unpack_from(">I", data, end - 4)
            if zlib.crc32(data[at + 4 : end - 4]) != crc:
                dropped = True
                at = end
                continue
        kept.append(data[at:end])
        at = end
        if kind == b"IEND":
            break
    if not dropped:
        return data
    return b"".join(kept)
