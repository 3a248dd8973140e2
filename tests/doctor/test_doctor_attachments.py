"""``luna doctor``'s attachments check over a real store in a temp data folder."""

from __future__ import annotations

from pathlib import Path

from luna.attachments import AttachmentStore
from luna.config import build_config
from luna.doctor.attachments import check_attachments
from tests.fakes.images import png


async def doctor(tmp_path: Path) -> list[tuple[str, bool | None, bool, str]]:
    env = {"MEMORY_DB_PATH": str(tmp_path / "data" / "luna.db")}
    cfg = build_config({}, env, base_dir=tmp_path)
    return [(r.name, r.ok, r.essential, r.detail) for r in await check_attachments(cfg)]


async def test_doctor_attachments_counts_the_store_and_warns_of_debris(tmp_path: Path) -> None:
    root = tmp_path / "data" / "attachments"
    (pillow, empty) = await doctor(tmp_path)
    assert pillow[:2] == ("images", True) and "Pillow" in pillow[3]
    assert empty[:2] == ("attachments", True) and "none stored yet" in empty[3]
    store = AttachmentStore(root)
    store.put(png(40, 30, seed=1), "a.png")
    store.put(png(40, 30, seed=2), "b.png")
    (_, counted) = await doctor(tmp_path)
    assert counted[:2] == ("attachments", True) and counted[3].startswith("2 stored, ")
    (root / "ab").mkdir(exist_ok=True)
    (root / "ab" / ".abcdef.tmp").write_bytes(b"half")
    (root / "photo.jpg").write_bytes(b"x")
    (_, _, partial, stray) = await doctor(tmp_path)
    assert partial[:3] == ("attachments", False, False) and "interrupted write" in partial[3]
    assert stray[:3] == ("attachments", False, False) and "photo.jpg" in stray[3]
