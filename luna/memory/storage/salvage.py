"""Reading the rows that are still readable out of a damaged SQLite file, page by page.

Why not SQLite's own recovery: the sqlite3 shell's ``.recover`` needs the ``sqlite_dbpage``
virtual table, and Debian 12's libsqlite3 (3.40.1) is built without it, so ``.recover`` fails
with "SQL logic error" on every file, sound ones included; pysqlite3-binary lacks it as well.
So this module follows the file format (https://sqlite.org/fileformat2.html) itself.

Invariants:
- Read-only: the file given is never written (``luna.memory.storage.recover`` hands it a scratch
  copy with the write-ahead log folded in).
- A table's rows come from its b-tree, walked from the root page that ``sqlite_schema`` (page
  1) names. A page that does not parse is skipped with what hangs below it; so is a cell that
  does not decode, and a row a cell repeats (first one kept).
- Table-leaf pages that no walk reached, that are on no freelist and hold no overflow data
  are *orphans* (a damaged interior page cut them off): the caller attributes them to a table
  by the shape of their rows, or leaves them out.
- Every bound is checked (page numbers, offsets, chains that loop): garbage can make a page
  unreadable, never the reader crash or hang.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAGIC = b"SQLite format 3\x00"
TABLE_INTERIOR, TABLE_LEAF = 5, 13
BTREE_TYPES = (2, 5, 10, 13)

Row = tuple[int, list[Any]]  # (rowid, values in column order)


class PageError(ValueError):
    """A page (or a cell in it) that does not follow the file format."""


@dataclass
class Salvage:
    """What :func:`read_file` found."""

    page_size: int
    page_count: int
    schema: list[tuple[str, str, int, str]]  # (type, name, root page, sql) of readable entries
    rows: dict[str, dict[int, list[Any]]] = field(default_factory=dict)  # table -> rowid -> row
    orphans: list[list[Row]] = field(default_factory=list)  # rows of each orphan leaf page
    bad_pages: set[int] = field(default_factory=set)


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = 0
    for i in range(9):
        if pos + i >= len(buf):
            raise PageError("varint runs past the page")
        byte = buf[pos + i]
        if i == 8:
            return (value << 8) | byte, pos + 9
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, pos + i + 1
    raise PageError("varint too long")  # pragma: no cover - the loop always returns


def _signed(raw: bytes) -> int:
    return int.from_bytes(raw, "big", signed=True)


def decode_record(payload: bytes) -> list[Any]:
    """A record (header of serial types, then the values) as Python values."""
    size, pos = _varint(payload, 0)
    if size < 1 or size > len(payload):
        raise PageError("record header size out of range")
    types = []
    while pos < size:
        serial, pos = _varint(payload, pos)
        types.append(serial)
    values: list[Any] = []
    body = size
    for serial in types:
        if serial in (10, 11):
            raise PageError("reserved serial type")
        width = (0, 1, 2, 3, 4, 6, 8, 8)[serial] if serial < 8 else (
            0 if serial < 12 else (serial - 12) // 2
        )  # fmt: skip
        raw = payload[body : body + width]
        if len(raw) != width:
            raise PageError("record value runs past its payload")
        body += width
        if serial == 0:
            values.append(None)
        elif serial <= 6:
            values.append(_signed(raw))
        elif serial == 7:
            values.append(struct.unpack(">d", raw)[0])
        elif serial in (8, 9):
            values.append(serial - 8)
        elif serial % 2 == 0:
            values.append(bytes(raw))
        else:
            try:
                values.append(raw.decode("utf-8"))
            except UnicodeDecodeError:
                raise PageError("text that is not UTF-8") from None
    return values


class Reader:
    """Pages of one file (the whole file in memory: a salvage run reads each page a few times)."""

    def __init__(self, path: Path) -> None:
        self.data = Path(path).read_bytes()
        header = self.data[:100]
        size = int.from_bytes(header[16:18], "big") if header[:16] == MAGIC else 4096
        size = 65536 if size == 1 else size
        if size < 512 or size > 65536 or size & (size - 1):
            size = 4096  # page 1 is garbage: the default page size is the best guess
        self.page_size = size
        reserved = header[20] if header[:16] == MAGIC else 0
        self.usable = size - reserved
        self.page_count = len(self.data) // size
        self.overflow_pages: set[int] = set()

    def page(self, number: int) -> bytes:
        if not 1 <= number <= self.page_count:
            raise PageError(f"page {number} is outside the file")
        start = (number - 1) * self.page_size
        return self.data[start : start + self.page_size]

    def btree_header(self, number: int) -> tuple[bytes, int, int, int]:
        """(page, header offset, page type, cell count) of a b-tree page."""
        page = self.page(number)
        h = 100 if number == 1 else 0
        kind = page[h]
        if kind not in BTREE_TYPES:
            raise PageError(f"page {number}: not a b-tree page (type {kind})")
        cells = int.from_bytes(page[h + 3 : h + 5], "big")
        head = 12 if kind in (2, 5) else 8
        if h + head + 2 * cells > self.usable:
            raise PageError(f"page {number}: {cells} cells do not fit")
        return page, h, kind, cells

    def cell_offsets(self, page: bytes, h: int, kind: int, cells: int) -> list[int]:
        head = 12 if kind in (2, 5) else 8
        first = h + head + 2 * cells
        out = []
        for i in range(cells):
            at = int.from_bytes(page[h + head + 2 * i : h + head + 2 * i + 2], "big")
            if not first <= at < self.usable:
                raise PageError(f"cell pointer {at} out of range")
            out.append(at)
        return out

    def leaf_rows(self, number: int) -> list[Row]:
        """The rows of one table-leaf page (cells that do not decode are left out)."""
        page, h, kind, cells = self.btree_header(number)
        if kind != TABLE_LEAF:
            raise PageError(f"page {number}: not a table leaf")
        rows = []
        for at in self.cell_offsets(page, h, kind, cells):
            try:
                rows.append(self._leaf_cell(page, at))
            except PageError:
                continue
        return rows

    def _leaf_cell(self, page: bytes, at: int) -> Row:
        size, pos = _varint(page, at)
        rowid, pos = _varint(page, pos)
        if rowid >= 1 << 63:
            rowid -= 1 << 64
        u = self.usable
        biggest = u - 35
        if size <= biggest:
            local = size
        else:
            least = (u - 12) * 32 // 255 - 23
            local = least + (size - least) % (u - 4)
            local = local if local <= biggest else least
        payload = bytearray(page[pos : pos + local])
        if len(payload) != local:
            raise PageError("cell runs past the page")
        if size > local:
            if pos + local + 4 > len(page):
                raise PageError("overflow pointer runs past the page")
            nxt = int.from_bytes(page[pos + local : pos + local + 4], "big")
            seen: set[int] = set()
            while len(payload) < size:
                if nxt in seen or not 1 <= nxt <= self.page_count:
                    raise PageError("broken overflow chain")
                seen.add(nxt)
                over = self.page(nxt)
                self.overflow_pages.add(nxt)
                payload += over[4 : min(u, 4 + size - len(payload))]
                nxt = int.from_bytes(over[:4], "big")
        return rowid, decode_record(bytes(payload))

    def walk_table(self, root: int, reached: set[int], bad: set[int]) -> Iterator[Row]:
        """Every readable row of the table b-tree at ``root``."""
        stack = [root]
        while stack:
            number = stack.pop()
            if number in reached:
                continue  # a loop, or a page two trees claim: read once
            reached.add(number)
            try:
                page, h, kind, cells = self.btree_header(number)
                if kind == TABLE_LEAF:
                    yield from self.leaf_rows(number)
                    continue
                if kind != TABLE_INTERIOR and number == root:
                    return  # a WITHOUT ROWID table (an index b-tree): FTS5's, rebuilt anyway
                if kind != TABLE_INTERIOR:
                    raise PageError(f"page {number}: index page inside a table")
                children = [int.from_bytes(page[h + 8 : h + 12], "big")]
                for at in self.cell_offsets(page, h, kind, cells):
                    children.append(int.from_bytes(page[at : at + 4], "big"))
            except PageError:
                bad.add(number)
                continue
            stack.extend(reversed(children))

    def freelist(self) -> set[int]:
        """Pages on the freelist (trunks and leaves), as far as it can be followed."""
        header = self.data[:100]
        if header[:16] != MAGIC:
            return set()
        out: set[int] = set()
        trunk = int.from_bytes(header[32:36], "big")
        while trunk and trunk not in out and 1 <= trunk <= self.page_count:
            out.add(trunk)
            page = self.page(trunk)
            count = int.from_bytes(page[4:8], "big")
            if count > (self.usable - 8) // 4:
                break
            for i in range(count):
                leaf = int.from_bytes(page[8 + 4 * i : 12 + 4 * i], "big")
                if 1 <= leaf <= self.page_count:
                    out.add(leaf)
            trunk = int.from_bytes(page[:4], "big")
        return out


def read_file(path: Path) -> Salvage:
    """Every readable row of every table, plus the orphan leaf pages (module invariants)."""
    reader = Reader(path)
    reached: set[int] = set()
    bad: set[int] = set()
    schema: list[tuple[str, str, int, str]] = []
    for _rowid, values in reader.walk_table(1, reached, bad):
        if len(values) >= 5 and isinstance(values[1], str) and isinstance(values[3], int):
            schema.append((str(values[0]), values[1], values[3], str(values[4] or "")))
    found = Salvage(reader.page_size, reader.page_count, schema, bad_pages=bad)
    for kind, name, root, _sql in schema:
        if kind != "table" or root <= 0:
            continue
        rows = found.rows.setdefault(name, {})
        for rowid, values in reader.walk_table(root, reached, bad):
            rows.setdefault(rowid, values)
    # Orphans: unreached table leaves. (An index's overflow page can look like one; the
    # caller's shape check leaves its "rows" out.)
    skip = reached | reader.freelist() | reader.overflow_pages
    for number in range(2, reader.page_count + 1):
        if number in skip or reader.page(number)[0] != TABLE_LEAF:
            continue
        try:
            leaf = reader.leaf_rows(number)
        except PageError:
            continue
        if leaf and number not in reader.overflow_pages:
            found.orphans.append(leaf)
    return found
