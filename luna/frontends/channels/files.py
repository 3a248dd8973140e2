"""The files that came with a burst of messages, as text the model reads.

Job: :func:`files_as_text` reads each :class:`IncomingFile` that is a text file no larger
than ``cap`` bytes and puts it inline in a code block; every other file becomes one line
saying what it is and why it was not read. (Until the attachments intake lands on main; then
the files go to it instead.)

Invariants:
- A file is read only when it is text by its declared type or name and its announced and
  actual size are at most ``cap``; a failed download is one line, never an exception.
- A voice note is never read: it cannot be transcribed yet, and the line says so (the
  channel tells the user too, :func:`has_voice`).
- Code fences inside a file are broken (a zero-width space), so a file cannot end the block.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import PurePath

from luna.frontends.channels.contract import ChannelError, IncomingFile
from luna.frontends.channels.sending import CALL_TIMEOUT
from luna.observe import log_event

TEXT_EXTENSIONS = frozenset(
    ".txt .md .markdown .rst .py .pyi .json .jsonl .yaml .yml .toml .ini .cfg .conf .csv .tsv "
    ".log .sh .bash .zsh .fish .js .ts .tsx .jsx .html .htm .css .xml .sql .rs .go .c .h .cc "
    ".cpp .hpp .java .kt .rb .php .lua .pl .r .swift .diff .patch .env.example .service "
    ".dockerfile .tex .srt .vtt".split()
)
VOICE_NOTICE = "I got your voice note, but I cannot transcribe voice notes yet; please type it."


def is_text_file(f: IncomingFile) -> bool:
    content_type = (f.declared_mime or "").split(";")[0].strip().lower()
    if content_type.startswith("text/") or content_type in ("application/json", "application/xml"):
        return True
    return PurePath(f.name).suffix.lower() in TEXT_EXTENSIONS


def has_voice(files: Iterable[IncomingFile]) -> bool:
    return any(f.kind == "voice" for f in files)


async def _one(f: IncomingFile, cap: int) -> str:
    if f.kind == "voice":
        return f"[voice note {f.name}: cannot be transcribed yet, not read]"
    if not is_text_file(f):
        return f"[attachment {f.name}: not a text file, not read]"
    if f.size > cap:
        return f"[attachment {f.name}: {f.size} bytes > {cap}, not read]"
    try:
        data = await asyncio.wait_for(f.read(), CALL_TIMEOUT)
    except (ChannelError, TimeoutError) as e:
        log_event("channel_error", op="read_attachment", error=type(e).__name__)
        return f"[attachment {f.name}: could not be downloaded]"
    if len(data) > cap:
        return f"[attachment {f.name}: {len(data)} bytes > {cap}, not read]"
    text = data.decode("utf-8", errors="replace").replace("```", "`\u200b``")
    return f"[attachment {f.name}]\n```\n{text}\n```"


async def files_as_text(files: Iterable[IncomingFile], cap: int) -> str:
    """The files as blocks to append to the user's text (see the module invariants)."""
    return "\n\n".join([await _one(f, cap) for f in files])
