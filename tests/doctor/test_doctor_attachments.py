"""``luna doctor``'s attachments check on a real database and attachment store."""

from __future__ import annotations

from collections.abc import Callable

from luna.attachments.intake import Intake, Upload
from luna.config import Config
from luna.doctor.checks import run_checks
from luna.memory import Memory
from tests.fakes.attachments import pdf, photo


async def _log_files(cfg: Config) -> list[str]:
    """Two files taken by the intake and logged with a user message, as the agent does."""
    got = await Intake(cfg).take_all(
        [Upload("a.jpg", photo(200, 100)), Upload("b.pdf", pdf(["hi"]))]
    )
    memory = Memory(cfg.memory)
    await memory.open(background=False)
    try:
        message = {
            "role": "user",
            "content": "files",
            "attachments": [a.to_json() for a in got.attachments],
        }
        await memory.append_message("s1", message)
    finally:
        await memory.close()
    return [a.sha256 for a in got.attachments]


async def test_doctor_attachments_names_missing_and_damaged_files(
    luna_config: Callable[..., Config],
) -> None:
    cfg = luna_config({"memory": {"embedding_process": False}})
    (r,) = await run_checks(cfg, only=["attachments"])
    assert r.ok is None and r.detail == "skipped (no attachments yet)"
    photo_sha, pdf_sha = await _log_files(cfg)
    (r,) = await run_checks(cfg, only=["attachments"])
    assert r.ok and r.detail.startswith("2 referenced, ") and "attachments" in r.detail

    store = cfg.data_dir / "attachments"
    (store / pdf_sha[:2] / pdf_sha).write_bytes(b"%PDF- changed")
    (store / photo_sha[:2] / photo_sha).unlink()
    (r,) = await run_checks(cfg, only=["attachments"])
    assert r.ok is False and not r.essential and r.mark == "⚠"
    assert "2 missing or damaged (first: attachment " in r.detail
    assert "luna restore" in r.fix
