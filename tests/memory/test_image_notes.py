"""A message's attachments in the session log, and image descriptions as searchable text."""

from __future__ import annotations

from pathlib import Path

from luna.memory.storage import image_notes, session_log
from luna.memory.storage.store import Store
from luna.messages import Attachment

RECEIPT = Attachment("image", "image/jpeg", "IMG_2291.jpg", 1_200_000, "a" * 64)
CHART = Attachment("image", "image/png", "chart.png", 4_000, "b" * 64)


def _found(store: Store, words: str) -> list[int]:
    """Message ids whose own search text matches ``words`` (not their neighbours')."""
    rows = store.query(
        "SELECT d.ref_id FROM docs_fts f JOIN docs d ON d.id = f.rowid "
        "WHERE docs_fts MATCH ? AND d.kind = 'message' ORDER BY d.ref_id",
        (f"text : {words}",),
    )
    return [int(r[0]) for r in rows]


def test_image_notes_attachments_come_back_in_order_and_descriptions_make_them_findable(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "luna.db")
    store.migrate()
    try:
        files = [RECEIPT.to_json(), CHART.to_json()]
        first = session_log.append_message(
            store, "s", {"role": "user", "content": "", "attachments": files}
        )
        plain = session_log.append_message(store, "s", {"role": "assistant", "content": "Nice."})
        (logged, reply) = session_log.messages_after(store, "s", 0)
        assert logged.id == first and logged.attachments == (RECEIPT, CHART)
        assert reply.id == plain and reply.attachments == ()
        # found by its name at once (an image-only message has no other text) ...
        assert _found(store, "IMG_2291") == [first]
        assert _found(store, "supermarket") == []
        # ... and by what it shows once described; the same image again changes nothing
        assert image_notes.set_description(store, RECEIPT.sha256, "A supermarket receipt.", "m")
        assert _found(store, "supermarket") == [first]
        assert image_notes.set_description(store, RECEIPT.sha256, "Something else.", "m") == 0
        assert image_notes.described(store, [RECEIPT.sha256, CHART.sha256]) == {
            RECEIPT.sha256: "A supermarket receipt."
        }
        # a later message with the same bytes is indexed with the description from the start
        again = session_log.append_message(
            store, "t", {"role": "user", "content": "this one", "attachments": files[:1]}
        )
        assert _found(store, "supermarket") == [first, again]
    finally:
        store.close()
