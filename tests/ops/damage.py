"""Making real damage in a real Luna database for the tests: which pages hold a table (the
sqlite3 shell's ``dbstat``, an independent reader) and garbage written over them."""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
import subprocess
from pathlib import Path


def table_pages(db: Path, table: str) -> list[tuple[int, str, int]]:
    """(page number, page type, cells) of every page of ``table``'s b-tree, in page order."""
    shell = shutil.which("sqlite3")
    assert shell, "the sqlite3 shell is needed (apt-get install sqlite3; .ci/install does it)"
    out = subprocess.run(
        [shell, "-readonly", str(db),
         f"SELECT pageno, pagetype, ncell FROM dbstat WHERE name = '{table}' ORDER BY pageno"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    return [(int(p), t, int(n)) for p, t, n in (line.split("|") for line in out.split())]


def middle_leaves(db: Path, table: str, count: int) -> list[tuple[int, int]]:
    """``count`` leaf pages from the middle of ``table``: (page, rows on it)."""
    leaves = [(p, n) for p, t, n in table_pages(db, table) if t == "leaf"]
    assert len(leaves) >= count + 4, f"{table} has only {len(leaves)} leaf pages"
    start = (len(leaves) - count) // 2
    return leaves[start : start + count]


def checkpoint(db: Path) -> None:
    """Fold the write-ahead log into the file, so what is damaged there is what is read."""
    conn = sqlite3.connect(db, timeout=30)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def garble(db: Path, pages: list[int], *, seed: int = 16) -> None:
    """Overwrite whole pages with random bytes (a disk that lost them)."""
    rng = random.Random(seed)
    size = int.from_bytes(db.read_bytes()[16:18], "big")
    with open(db, "r+b") as f:
        for page in pages:
            f.seek((page - 1) * size)
            f.write(bytes(rng.getrandbits(8) for _ in range(size)))
        f.flush()
        os.fsync(f.fileno())
