"""Held messages (luna.memory.storage.held) on a real SQLite file: written once and in order, also
when a crash left the file behind after its commit, and a line that is not a held message never
blocks the rest."""

from __future__ import annotations

import json
from pathlib import Path

from luna.memory.storage.held import HeldMessages
from luna.memory.storage.store import Store


def open_store(tmp_path: Path) -> Store:
    store = Store(tmp_path / "data" / "luna.db", load_vec=False)
    store.migrate()
    return store


def logged(store: Store) -> list[tuple[str, str, str]]:
    return [tuple(r) for r in store.query("SELECT session_id, role, content FROM messages")]


def test_held_flush_writes_in_order_once_even_after_a_crash_before_the_file_went(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path)
    held = HeldMessages(tmp_path / "data" / "held_messages.jsonl")
    held.hold("s1", {"role": "user", "content": "first"}, context=None, scope="owner")
    held.hold("s1", {"role": "user", "content": "second \ud800"}, context="ctx", scope="owner")
    kept = held.path.read_bytes()
    assert held.flush(store) == 2
    assert not held.pending
    held.path.write_bytes(kept)  # as if Luna died after the commit, before the unlink
    assert held.flush(store) == 0
    held.hold("s2", {"role": "assistant", "content": "third"}, context=None, scope="owner")
    assert held.flush(store) == 1
    assert logged(store) == [
        ("s1", "user", "first"),
        ("s1", "user", "second \ufffd"),  # a lone surrogate is kept visibly replaced
        ("s2", "assistant", "third"),
    ]
    assert store.query("SELECT context FROM messages WHERE content LIKE 'second%'") == [("ctx",)]
    store.close()


def test_held_file_with_a_broken_line_writes_the_good_ones(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    held = HeldMessages(tmp_path / "data" / "held_messages.jsonl")
    held.hold("s1", {"role": "user", "content": "kept"}, context=None, scope="owner")
    with held.path.open("a") as f:
        f.write(json.dumps({"hold_id": "x", "session_id": "s1", "message": {"role": "x"}}) + "\n")
        f.write('{"hold_id": "torn", "session_id": "s1", "mess')  # power lost mid-append
    assert held.flush(store) == 1
    assert logged(store) == [("s1", "user", "kept")]
    assert not held.pending
    store.close()
