"""Download a message's ``mxc://`` file, decrypting it when it came through an encrypted room.

Job: :func:`download` fetches one :class:`~luna.frontends.matrix.events.MatrixFile` through
the authenticated media API (``/_matrix/client/v1/media/download``) and returns its bytes;
:func:`download_capped` is the channel layer's ``IncomingFile.read_capped``.

Invariants:
- At most ``cap`` bytes are read: a larger file is refused (MatrixError) while streaming,
  never held whole in memory first. ``download_capped(limit)`` instead stops at ``limit + 1``
  bytes and returns them undecrypted (all the layer reads of them is that the file is too
  big: AES-CTR keeps the length).
- An encrypted file's SHA-256 is checked against the event's hash before it is decrypted
  (mautrix's ``decrypt_attachment``); a mismatch is a MatrixError, never garbled bytes.
- Decryption (AES-CTR over up to ``cap`` bytes) runs off the event loop.
"""

from __future__ import annotations

import asyncio
from urllib.parse import quote

import httpx
from mautrix.crypto.attachments import decrypt_attachment
from mautrix.errors import DecryptionError

from luna.errors import MatrixError
from luna.frontends.matrix.events import MatrixFile


def media_path(url: str) -> str:
    """The download path of an ``mxc://server/id`` URL."""
    server, _, media_id = url.removeprefix("mxc://").partition("/")
    if not server or not media_id:
        raise MatrixError(f"not an mxc:// media URL: {url[:80]}")
    return f"/_matrix/client/v1/media/download/{quote(server, safe='')}/{quote(media_id, safe='')}"


async def download(http: httpx.AsyncClient, token: str, file: MatrixFile, cap: int) -> bytes:
    """The file's (decrypted) bytes; MatrixError when it is over ``cap`` or cannot be had."""
    data = await _fetch(http, token, file, cap)
    if len(data) > cap:
        raise MatrixError(f"{file.name} is larger than {cap} bytes")
    return await _decrypted(file, data)


async def download_capped(
    http: httpx.AsyncClient, token: str, file: MatrixFile, limit: int
) -> bytes:
    """The file's (decrypted) bytes, or its first ``limit + 1`` when it is larger."""
    data = await _fetch(http, token, file, limit)
    return data if len(data) > limit else await _decrypted(file, data)


async def _fetch(http: httpx.AsyncClient, token: str, file: MatrixFile, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of the file as the homeserver keeps it."""
    chunks: list[bytes] = []
    size = 0
    headers = {"Authorization": f"Bearer {token}"}
    try:
        async with http.stream("GET", media_path(file.url), headers=headers) as resp:
            if resp.status_code != 200:
                raise MatrixError(f"the homeserver refused the file ({resp.status_code})")
            async for chunk in resp.aiter_bytes():
                size += len(chunk)
                chunks.append(chunk)
                if size > limit:
                    break
    except httpx.HTTPError as e:
        raise MatrixError(f"downloading {file.name} failed: {type(e).__name__}") from e
    return b"".join(chunks)[: limit + 1]


async def _decrypted(file: MatrixFile, data: bytes) -> bytes:
    enc = file.encryption
    if enc is None:
        return data
    try:
        key = enc["key"]["k"]
        digest = enc["hashes"]["sha256"]
        iv = enc["iv"]
    except (KeyError, TypeError) as e:
        raise MatrixError(f"{file.name}: the event's encryption info is incomplete") from e
    try:
        return await asyncio.to_thread(decrypt_attachment, data, key, digest, iv)
    except DecryptionError as e:
        raise MatrixError(f"{file.name} does not decrypt ({e})") from e
