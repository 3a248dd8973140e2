"""File tools: ``read_file``, ``write_file``, ``list_directory``, confined to allowed roots.

Invariants:
- Every path is resolved (``~``, ``..`` and symlinks) before the check; relative paths start at
  the workspace (or a sub-agent's folder). Reads are allowed under the workspace,
  ``tools.read_roots`` and ``tools.write_roots``, plus ``tools.outputs_dir`` (read-only, so the
  agent can read saved large outputs) and the skills' folders (read-only, even the ones in the
  data folder); writes only under the workspace and ``write_roots``.
- Luna's private files (database, logs, ``.env``, the rest of the data folder) are never
  readable or writable, even when a configured root contains them.
- After opening, the real path of the open descriptor is checked again, so a symlink swapped
  in between the check and the open cannot redirect the tool.
- A PDF or Office file is read as text through the attachments' conversion
  (``luna.attachments.documents``: a child process, pages capped), shown by line window.
- File work runs in a thread; outputs stay under ``tools.passthrough_bytes`` so a read never
  turns into another saved large output.
"""

from __future__ import annotations

import asyncio
import io
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from luna.attachments.documents import LABELS, convert, is_convertible
from luna.attachments.sniff import TEXT, sniff
from luna.config import Config
from luna.errors import ToolError
from luna.skills.library import readable_roots
from luna.tools.registry import ToolContext, ToolRegistry
from luna.tools.sandbox import protected_paths

MAX_READ_BYTES = 20_000_000  # files above this are read by line window only up to this size
BINARY_SNIFF = 8192
DOCUMENT_MAGIC = (b"%PDF-", b"PK\x03\x04")  # PDF, and the zip every Office file is
MAX_LINE_BYTES = 4096  # a longer line is shown cut; the rest of it is skipped unread-into-memory


def _lines(f: Any, max_line: int, max_total: int) -> Iterator[tuple[bytes | None, int]]:
    """(first ``max_line`` bytes of each line, the line's length) in constant memory.

    The rest of a long line is skipped chunk by chunk. After ``max_total`` bytes, yields
    ``(None, 0)`` once and stops.
    """
    skip = max(max_line, 65536)
    total = 0
    while total <= max_total:
        raw = f.readline(max_line)
        if not raw:
            return
        length, last, size = len(raw), raw, max_line
        while not last.endswith(b"\n") and len(last) == size and total + length <= max_total:
            last, size = f.readline(skip), skip
            length += len(last)
        total += length
        yield raw, length
    yield None, 0


class PathPolicy:
    """Decides which resolved paths the file tools may read or write."""

    def __init__(self, cfg: Config) -> None:
        self.workspace = cfg.agent.workspace.resolve()
        self.outputs = cfg.tools.outputs_dir.resolve()
        self.write_roots = [self.workspace, *(p.resolve() for p in cfg.tools.write_roots)]
        self.read_roots = [
            *self.write_roots,
            *(p.resolve() for p in cfg.tools.read_roots),
            *(p.resolve() for p in readable_roots(cfg)),  # skills: read, never written
        ]
        self.data_dir = cfg.data_dir.resolve()
        db = cfg.memory.db_path.resolve()
        extra = [db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")]
        self.private_items = [p for p in [*protected_paths(cfg), *extra] if p != self.data_dir]

    def resolve(self, raw: str, base: Path | None = None) -> Path:
        p = Path(raw).expanduser()
        if not p.is_absolute():
            p = (base or self.workspace) / p
        return p.resolve()

    def check(self, path: Path, *, write: bool) -> None:
        """Raise ToolError unless ``path`` (already resolved) is allowed."""
        if not write and path.is_relative_to(self.outputs):
            return
        roots = self.write_roots if write else self.read_roots
        if not any(path.is_relative_to(r) for r in roots):
            where = "the workspace" + (" or write_roots" if write else " or read_roots")
            raise ToolError(f"{path} is outside {where}; access refused")
        if path.is_relative_to(self.data_dir) and not any(
            path.is_relative_to(r) and r != self.data_dir and r.is_relative_to(self.data_dir)
            for r in self.read_roots
        ):
            raise ToolError(f"{path} is inside Luna's private data folder; access refused")
        for item in self.private_items:
            if path.is_relative_to(item):
                raise ToolError(f"{path} is Luna's private data; access refused")

    def check_fd(self, fd: int, *, write: bool) -> None:
        real = Path(os.readlink(f"/proc/self/fd/{fd}"))
        self.check(real, write=write)


def _base(ctx: ToolContext, policy: PathPolicy) -> Path:
    if ctx.workdir is not None:
        w = ctx.workdir.resolve()
        if w.is_relative_to(policy.workspace):
            return w
    return policy.workspace


def _open_checked(policy: PathPolicy, path: Path) -> tuple[BinaryIO, os.stat_result]:
    """``path`` opened for reading after every check (see the module invariants)."""
    policy.check(path, write=False)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ToolError(f"{path} does not exist") from None
    except IsADirectoryError:
        raise ToolError(f"{path} is a directory; use list_directory") from None
    except OSError as e:
        raise ToolError(f"cannot open {path}: {e.strerror}") from e
    f = os.fdopen(fd, "rb")
    try:
        policy.check_fd(f.fileno(), write=False)
        st = os.fstat(f.fileno())
        if stat.S_ISDIR(st.st_mode):
            raise ToolError(f"{path} is a directory; use list_directory")
        if not stat.S_ISREG(st.st_mode):
            raise ToolError(f"{path} is not a regular file")
    except BaseException:
        f.close()
        raise
    return f, st


def _read(
    policy: PathPolicy, path: Path, offset: int, limit: int, budget: int, doc_cap: int
) -> str | bytes:
    """A line window of a text file; or, for a PDF or an Office file (a zip), its bytes, for
    the caller to convert (at most ``doc_cap`` of them)."""
    f, st = _open_checked(policy, path)
    with f:
        head = f.read(BINARY_SNIFF)
        if head.startswith(DOCUMENT_MAGIC):
            if st.st_size > doc_cap:
                raise ToolError(
                    f"{path} is a {st.st_size:,}-byte document; documents over {doc_cap:,} "
                    "bytes (attachments.max_bytes) are not converted"
                )
            return head + f.read(doc_cap)
        if b"\0" in head:
            raise ToolError(f"{path} looks binary ({st.st_size} bytes); not shown")
        f.seek(0)
        return _window(f, f"{path} ({st.st_size} bytes)", offset, limit, budget)


def _window(f: BinaryIO, title: str, offset: int, limit: int, budget: int) -> str:
    """Lines ``offset`` to ``offset + limit - 1`` of ``f``, numbered, within ``budget``."""
    out: list[str] = []
    used = 0
    line_no = 0
    more = False
    for raw, length in _lines(f, MAX_LINE_BYTES, MAX_READ_BYTES):
        line_no += 1
        if raw is None:  # the byte cap was reached inside the file
            more = True
            break
        if line_no < offset:
            continue
        if line_no >= offset + limit:
            more = True
            break
        line = raw.decode("utf-8", "replace").rstrip("\n")
        if length > len(raw):
            line = f"{line} [... line cut after {len(raw)} of {length} bytes]"
        entry = f"{line_no:>6}\t{line}"
        if used + len(entry) + 1 > budget:
            if not out:  # one line wider than the budget: show its start
                out.append(entry[: max(budget - 100, 100)] + " [... line cut ...]")
                line_no += 1
            out.append(
                f"[... stopped at line {line_no}: output limit; read on with offset={line_no} ...]"
            )
            more = False
            break
        out.append(entry)
        used += len(entry) + 1
    if not out:
        return f"{title}: no lines at offset {offset} (it has {line_no} lines)"
    header = f"{title}, lines {offset}-{min(line_no, offset + limit - 1)}"
    footer = f"\n[more lines follow; continue with offset={offset + limit}]" if more else ""
    return header + "\n" + "\n".join(out) + footer


async def _document(
    path: Path, data: bytes, offset: int, limit: int, budget: int, max_pages: int
) -> str:
    """A workspace document read through the attachments' conversion, as a line window."""
    sniffed = await asyncio.to_thread(sniff, data)
    if not is_convertible(sniffed.mime) or sniffed.mime == TEXT:
        raise ToolError(f"{path} looks binary ({len(data)} bytes, {sniffed.mime}); not shown")
    doc = await convert(data, sniffed.mime, max_pages)
    title = f"{path} ({LABELS[sniffed.mime]}, {len(data)} bytes; {doc.note})"
    if not doc.text.strip():
        return f"{title}: no text to show"
    text = io.BytesIO(doc.text.encode("utf-8"))
    return await asyncio.to_thread(_window, text, f"{title}, as text", offset, limit, budget)


def _write(policy: PathPolicy, path: Path, content: str, append: bool) -> str:
    policy.check(path, write=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    policy.check(path.parent.resolve(), write=True)
    # No O_TRUNC: a swapped symlink must not truncate anything before the descriptor check.
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if append else 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as e:
        raise ToolError(f"cannot write {path}: {e.strerror}") from e
    with os.fdopen(fd, "wb") as f:
        policy.check_fd(f.fileno(), write=True)
        if not append:
            f.truncate(0)
        data = content.encode("utf-8")
        f.write(data)
    return f"{'appended' if append else 'wrote'} {len(data)} bytes to {path}"


def _list(policy: PathPolicy, root: Path, recursive: bool, depth: int, max_entries: int) -> str:
    policy.check(root, write=False)
    if not root.is_dir():
        raise ToolError(f"{root} is not a directory")
    lines: list[str] = []
    truncated = False

    def walk(d: Path, level: int) -> None:
        nonlocal truncated
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError as e:
            lines.append(f"{'  ' * level}[cannot list {d.name}: {e.strerror}]")
            return
        for entry in entries:
            if len(lines) >= max_entries:
                truncated = True
                return
            p = Path(entry.path)
            try:
                policy.check(p.resolve(), write=False)
            except ToolError:
                continue
            if entry.is_dir(follow_symlinks=False):
                lines.append(f"{'  ' * level}{entry.name}/")
                if recursive and level + 1 < depth:
                    walk(p, level + 1)
            else:
                size = entry.stat(follow_symlinks=False).st_size
                suffix = " -> symlink" if entry.is_symlink() else f" ({size} bytes)"
                lines.append(f"{'  ' * level}{entry.name}{suffix}")

    walk(root, 0)
    if not lines:
        return f"{root}: empty"
    tail = f"\n[stopped at {max_entries} entries]" if truncated else ""
    return f"{root}:\n" + "\n".join(lines) + tail


def register(reg: ToolRegistry, cfg: Config) -> None:
    policy = PathPolicy(cfg)
    budget = max(cfg.tools.passthrough_bytes - 500, 1000)
    doc_cap = cfg.attachments.max_bytes

    @reg.tool(level="allow")
    async def read_file(path: str, offset: int = 1, limit: int = 200, *, ctx: ToolContext) -> str:
        """Read a text file from the workspace (or a saved tool output), by line window.
        A PDF, Word, Excel or PowerPoint file is read as its text.

        Args:
            path: File path, relative to the workspace or absolute.
            offset: First line to show (1-based).
            limit: Maximum number of lines to show.
        """
        p = policy.resolve(path, _base(ctx, policy))
        offset, limit = max(offset, 1), max(limit, 1)
        got = await asyncio.to_thread(_read, policy, p, offset, limit, budget, doc_cap)
        if isinstance(got, bytes):
            return await _document(p, got, offset, limit, budget, cfg.attachments.max_pages)
        return got

    @reg.tool(level="ask")
    async def write_file(path: str, content: str, append: bool = False, *, ctx: ToolContext) -> str:
        """Write (or append) text to a file in the workspace; parent folders are created.

        Args:
            path: File path, relative to the workspace or absolute.
            content: The text to write.
            append: Append to the file instead of replacing it.
        """
        p = policy.resolve(path, _base(ctx, policy))
        return await asyncio.to_thread(_write, policy, p, content, append)

    @reg.tool(level="allow")
    async def list_directory(
        path: str = ".",
        recursive: bool = False,
        max_depth: int = 3,
        max_entries: int = 200,
        *,
        ctx: ToolContext,
    ) -> str:
        """List the files and folders in a directory.

        Args:
            path: Directory path, relative to the workspace or absolute.
            recursive: Also list sub-folders.
            max_depth: How many levels deep to go when recursive.
            max_entries: Stop after this many entries.
        """
        p = policy.resolve(path, _base(ctx, policy))
        depth = max(1, min(max_depth, 10))
        entries = max(1, min(max_entries, 2000))
        return await asyncio.to_thread(_list, policy, p, recursive, depth, entries)
