"""``luna doctor``'s attachments check: Pillow decodes images, and the store's folder is sound.

Reports the files kept in ``<data>/attachments`` (count, size); a file whose name is not a
content hash in its ``ab/`` folder, and a temp file an interrupted write left behind, are each a
warning with the fix. A missing Pillow fails: Luna cannot take images without it.

Invariants: reads only (nothing is created, moved or removed); no network; blocking work (a
walk of the folder) runs in a worker thread.
"""

from __future__ import annotations

import re
from pathlib import Path

from luna.agent.images import size_text
from luna.config import Config
from luna.doctor.result import CheckResult, fail, in_thread, ok

HASH = re.compile(r"[0-9a-f]{64}\Z")


def _pillow() -> CheckResult:
    try:
        import PIL
    except ImportError:
        return fail(
            "images",
            "Pillow is not installed: attached images cannot be read",
            "install Luna's locked dependencies again (pip install -r requirements.lock)",
        )
    return ok("images", f"decoded by Pillow {PIL.__version__}")


def _folder(root: Path) -> list[CheckResult]:
    if not root.is_dir():
        return [ok("attachments", f"none stored yet ({root})")]
    count = 0
    size = 0
    strays: list[str] = []
    partial: list[str] = []
    for path in sorted(root.rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(root)
        if path.name.endswith(".tmp"):
            partial.append(str(rel))
        elif rel.parts[0] == "normalized":
            continue  # the cache of what the model gets: rebuilt from the originals
        elif len(rel.parts) == 2 and HASH.match(path.name) and rel.parts[0] == path.name[:2]:
            count += 1
            size += path.stat().st_size
        else:
            strays.append(str(rel))
    results = [ok("attachments", f"{count} stored, {size_text(size)}, in {root}")]
    if partial:
        results.append(
            fail(
                "attachments",
                f"{len(partial)} temp file(s) of an interrupted write: {', '.join(partial[:3])}",
                f"stop Luna, then remove them from {root}",
                essential=False,
            )
        )
    if strays:
        results.append(
            fail(
                "attachments",
                f"{len(strays)} file(s) not named by their content hash: {', '.join(strays[:3])}",
                f"Luna never reads them: move them out of {root}",
                essential=False,
            )
        )
    return results


def _all(cfg: Config) -> list[CheckResult]:
    from luna.attachments.store import attachments_dir

    return [_pillow(), *_folder(attachments_dir(cfg.data_dir))]


async def check_attachments(cfg: Config) -> list[CheckResult]:
    return await in_thread(_all, cfg)
