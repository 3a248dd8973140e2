"""A Matrix message's files as text for the turn (until Luna's attachments intake lands).

Job: :func:`files_text` downloads each file of a message (decrypted when it came encrypted,
``luna.frontends.matrix.media``) and describes it the way the Discord front-end does: a text
file's content inline, anything else one line naming it, its sniffed size and its SHA-256.

Invariants:
- A file over ``cap`` bytes, or one that cannot be fetched or decrypted, becomes one line
  saying so; it never fails the turn.
- Text is recognised by a declared ``text/*`` (or JSON/XML) type and valid UTF-8; the
  sender's declared type is otherwise only shown, never trusted.
"""

from __future__ import annotations

import hashlib

import httpx

from luna.errors import MatrixError
from luna.frontends.matrix.events import MatrixFile
from luna.frontends.matrix.media import download

TEXT_MIMES = ("application/json", "application/xml")


def _is_text(file: MatrixFile, data: bytes) -> bool:
    mime = (file.declared_mime or "").split(";")[0].strip().lower()
    if not (mime.startswith("text/") or mime in TEXT_MIMES):
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


async def describe(http: httpx.AsyncClient, token: str, file: MatrixFile, cap: int) -> str:
    """One block (a text file) or one line (anything else) for ``file``."""
    try:
        data = await download(http, token, file, cap)
    except MatrixError as e:
        return f"[attachment {file.name}: not read ({e})]"
    if _is_text(file, data):
        text = data.decode("utf-8").replace("```", "`\u200b``")
        return f"[attachment {file.name}]\n```\n{text}\n```"
    digest = hashlib.sha256(data).hexdigest()
    mime = file.declared_mime or "unknown type"
    return f"[attachment {file.name}: {mime}, {len(data)} bytes, sha256 {digest}]"


async def files_text(
    http: httpx.AsyncClient, token: str, files: tuple[MatrixFile, ...], cap: int
) -> str:
    return "\n\n".join([await describe(http, token, f, cap) for f in files])
