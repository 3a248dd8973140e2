"""The attachment store: content-addressed, atomic, checked references, damage found."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from luna.attachments.store import AttachmentStore, attachments_dir, digest
from luna.errors import AttachmentMissingError


def test_store_writes_under_the_hash_once(tmp_path: Path) -> None:
    store = AttachmentStore(attachments_dir(tmp_path))
    sha = store.write(b"hello")
    assert sha == digest(b"hello")
    path = tmp_path / "attachments" / sha[:2] / sha
    assert path.read_bytes() == b"hello"
    before = path.stat()
    past = before.st_mtime - 3600
    os.utime(path, (past, past))
    assert store.write(b"hello") == sha  # the same bytes again: left as they are (same file),
    assert path.stat().st_ino == before.st_ino
    assert path.stat().st_mtime > past + 3000  # only marked as taken in now
    assert store.taken_at(sha) == path.stat().st_mtime
    assert list(store.hashes()) == [sha]
    assert store.read(sha) == b"hello"
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_store_read_finds_a_missing_or_damaged_file(tmp_path: Path) -> None:
    store = AttachmentStore(tmp_path / "a")
    sha = store.write(b"the original bytes")
    store.path(sha).write_bytes(b"the original bytez")
    assert store.verify(sha) == f"attachment {sha[:12]} is damaged"
    with pytest.raises(AttachmentMissingError, match="damaged"):
        store.read(sha)
    assert store.write(b"the original bytes") == sha  # a resend repairs a damaged file
    assert store.verify(sha) is None
    store.path(sha).unlink()
    assert store.verify(sha) == f"attachment {sha[:12]} is missing"
    assert store.write(b"the original bytes") == sha  # a resend repairs a missing file
    assert store.verify(sha) is None


def test_store_refuses_a_reference_that_is_not_a_hash(tmp_path: Path) -> None:
    store = AttachmentStore(tmp_path / "a")
    for bad in ("../../etc/passwd", "AB" * 32, "ab", "g" * 64, "a" * 63 + "/"):
        with pytest.raises(AttachmentMissingError, match="not an attachment reference"):
            store.path(bad)
        assert not store.has(bad)


def test_store_remove_takes_the_file_and_its_derived_copies(tmp_path: Path) -> None:
    store = AttachmentStore(tmp_path / "a")
    keep, gone = store.write(b"keep"), store.write(b"gone")
    derived = store.root / "derived" / "1024" / gone[:2] / f"{gone}.png"
    derived.parent.mkdir(parents=True)
    derived.write_bytes(b"png")
    assert store.remove([gone]) == 1
    assert not derived.exists() and not store.has(gone) and store.has(keep)
    assert list(store.hashes()) == [keep]  # derived/ and stray files are not references
    assert store.total_bytes() == 4


def test_store_write_is_durable_through_a_rename(tmp_path: Path) -> None:
    """The file appears whole or not at all: a leftover temp file is never a reference."""
    store = AttachmentStore(tmp_path / "a")
    sha = store.write(os.urandom(100_000))
    folder = store.path(sha).parent
    (folder / ".stray.tmp").write_bytes(b"half")
    assert list(store.hashes()) == [sha]
