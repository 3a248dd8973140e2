"""``luna doctor``'s attachments check: the files the session log refers to are there and sound.

Invariants: read-only (the database opened ``mode=ro``, files only read); every file a message
refers to is checked against its hash, so a missing or damaged one is named (⚠, not essential:
its message stays, only the file is gone) with the way back (``luna restore``); the folder's
size and the files no message refers to are reported, with the command that deletes them
(``luna sessions sweep``: left by a crash during a forget, or a restore).
"""

from __future__ import annotations

from luna.attachments.sizes import size_text
from luna.attachments.store import AttachmentStore, attachments_dir
from luna.config import Config
from luna.doctor.result import CheckResult, fail, in_thread, ok, skipped
from luna.memory.storage.backup_files import referenced

NAME = "attachments"


def _scan(cfg: Config) -> list[CheckResult]:
    store = AttachmentStore(attachments_dir(cfg.data_dir))
    db_path = cfg.memory.db_path
    wanted = referenced(db_path) if db_path.is_file() else set()
    stored = set(store.hashes())
    if not wanted and not stored:
        return [skipped(NAME, "no attachments yet")]
    problems = {sha: why for sha in sorted(wanted) if (why := store.verify(sha)) is not None}
    loose = len(stored - wanted)
    summary = f"{len(wanted)} referenced, {size_text(store.total_bytes())} in {store.root}" + (
        f"; {loose} no message refers to (`luna sessions sweep` deletes those a day old)"
        if loose
        else ""
    )
    if not problems:
        return [ok(NAME, summary)]
    first = next(iter(problems.values()))
    detail = f"{summary}; {len(problems)} missing or damaged (first: {first})"
    fix = (
        "their messages are kept without the files; `luna restore BACKUP` copies back the "
        "files beside a backup (attachments/ next to the .db)"
    )
    return [fail(NAME, detail, fix, essential=False)]


async def check_attachments(cfg: Config) -> list[CheckResult]:
    return await in_thread(_scan, cfg)
