"""Download a message's ``mxc://`` file, decrypting it when it came through an encrypted room.

Job: :func:`download` fetches one :class:`~luna.frontends.matrix.events.MatrixFile` through
the authenticated media API (``/_matrix/client/v1/media/download``) and returns its bytes.

Invariants:
- At most ``cap`` bytes are read: a larger file is refused (MatrixError) while streaming,
  never held whole in memory first.
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
    chunks: list[bytes] = []
    size = 0
    headers = {"Authorization": f"Bearer {token}"}
    try:
        async with http.stream("GET", media_path(file.url), headers=headers) as resp:
            if resp.status_code != 200:
                raise MatrixError(f"the homeserver refused the file ({resp.status_code})")
            async for chunk in resp.aiter_bytes():
                size += len(chunk)
                if size > cap:
                    raise MatrixError(f"{file.name} is larger than {cap} bytes")
                chunks.append(chunk)
    except httpx.HTTPError as e:
        raise MatrixError(f"downloading {file.name} failed: {type(e).__name__}") from e
    data = b"".join(chunks)
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
