"""``luna memory …`` commands: search, list, add, forget, stats, reindex, import, prepare.

Invariants:
- Each command opens the memory database (``async with open_memory(cfg)``), does one job and
  closes it, also on failure; the exit code says whether it worked (import: non-zero when any
  line was skipped).
- Bad input never raises a traceback: a malformed import line (bad JSON or UTF-8, nested too
  deeply, a lone surrogate, a date out of range, longer than ``MAX_LINE_BYTES``) is reported
  with its line number and skipped, the rest imports. A line without an ``id`` gets one from
  its content (:func:`content_id`), so importing a file again adds nothing twice. Lines are
  split on ``\n`` only: U+2028, U+0085 and friends are valid inside a JSON string, so
  ``splitlines`` would cut good lines apart.
- A one-shot ``search`` answers from what is indexed: it embeds at most ``SEARCH_EMBEDS``
  missing vectors (what was just added), and says how many are found by keyword only.
- ``search -k`` is clamped to :data:`~luna.memory.recall.search.MAX_K` with a note; a ``--batch``
  file that is not UTF-8 text is one line, never a traceback.
- Output for machines (``--json``) is one JSON object per line.
- Stored text reaches the terminal only through ``neutralize`` (``terminal_json`` for JSON):
  an imported memory or a chat message cannot drive the terminal (OSC 52, C1 codes).
- Beside a running Luna (``luna.datafolder``): reading commands and ``add``/``import``/
  ``forget`` go through (WAL lets one process write while others read, a busy database is
  waited for, and the running Luna sees the change at its next query). ``reindex`` too: a
  running Luna sees the vectors become another model's and answers keyword-only (logged) until
  it is restarted with the new model, which answers from vectors for what is re-embedded and
  from FTS for the rest. ``reindex`` stopped at any point (``kill -9``) resumes where it
  stopped when run again; it prints a progress bar on a terminal, else a line every
  ``PROGRESS_EVERY_S``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from luna.config import Config
from luna.errors import LunaError
from luna.ids import id_argument, scope_argument
from luna.memory import Memory
from luna.memory.browse import recall_json
from luna.memory.recall.search import MAX_K
from luna.memory.reindex import reindex
from luna.memory.storage.facts import normalize_timestamp
from luna.messages import clean_text, neutralize, terminal_json
from luna.observe.progress import progress_bar

IMPORT_BATCH = 256
SEARCH_EMBEDS = 128  # a one-shot search embeds at most about this many missing vectors
MAX_LINE_BYTES = 1 << 20  # 1 MiB: a memory is a note, not a document
PROGRESS_EVERY_S = 5.0
SOURCES = ("user", "assistant", "tool", "import")


def add_parser(subparsers: Any) -> None:
    """Add ``memory`` and its subcommands to the top-level CLI."""
    p = subparsers.add_parser("memory", help="search and manage Luna's long-term memory")
    sub = p.add_subparsers(dest="memory_command", required=True, metavar="COMMAND")

    s = sub.add_parser("search", help="hybrid search over messages, memories and summaries")
    s.add_argument("query", nargs="?", help="what to look for")
    s.add_argument("-k", type=int, default=None, help="number of results (default recall_k)")
    s.add_argument("--json", action="store_true", help="one JSON line per query")
    s.add_argument("--batch", type=Path, help="file with one query per line")
    s.add_argument(
        "--scope", default="owner", type=scope_argument, help='"owner" or "user:<discord id>"'
    )
    s.set_defaults(handler=search_cmd)

    ls = sub.add_parser("list", help="list stored memories, newest first")
    ls.add_argument("-n", "--limit", type=int, default=50, help="how many (default 50)")
    ls.add_argument(
        "--scope", default=None, type=scope_argument, help="only this scope (default: all)"
    )
    ls.add_argument("--json", action="store_true", help="one JSON line per memory")
    ls.set_defaults(handler=list_cmd)

    a = sub.add_parser("add", help="remember a note")
    a.add_argument("text", help="the note")
    a.add_argument("--importance", type=int, default=5, help="1-10 (default 5)")
    a.add_argument(
        "--scope", default="owner", type=scope_argument, help='"owner" or "user:<discord id>"'
    )
    a.set_defaults(handler=add_cmd)

    f = sub.add_parser("forget", help="delete a memory by id")
    f.add_argument("id", type=id_argument("a memory"), help="memory id (see `luna memory list`)")
    f.set_defaults(handler=forget_cmd)

    st = sub.add_parser("stats", help="counts, database size, embedding model")
    st.add_argument("--json", action="store_true", help="print one JSON object")
    st.set_defaults(handler=stats_cmd)

    r = sub.add_parser("reindex", help="re-embed everything with the configured model")
    r.set_defaults(handler=reindex_cmd)

    pr = sub.add_parser("prepare", help="prepare the embedding model now (once per machine)")
    pr.set_defaults(handler=prepare_cmd)

    im = sub.add_parser("import", help="import memories from a JSON-lines file")
    im.add_argument("file", type=Path, help='JSONL: {"text": ..., "id"?, "created_at"?, ...}')
    im.add_argument(
        "--scope", default="owner", type=scope_argument, help='"owner" or "user:<discord id>"'
    )
    im.set_defaults(handler=import_cmd)


@contextlib.asynccontextmanager
async def open_memory(cfg: Config, **kwargs: Any) -> AsyncIterator[Memory]:
    """The memory database, open for one command and closed after it, whatever happens.

    ``kwargs`` go to :meth:`Memory.open`; a missing vector index is said once on stderr.
    """
    mem = Memory(cfg.memory)
    await mem.open(background=False, **kwargs)
    try:
        if not mem.vector_enabled:
            print(
                f"note: vector search unavailable ({mem.vector_error}); keyword search only",
                file=sys.stderr,
            )
        yield mem
    finally:
        await mem.close()


async def search_cmd(args: argparse.Namespace, cfg: Config) -> int:
    if args.batch is None and not args.query:
        print("luna memory search: give a QUERY or --batch FILE", file=sys.stderr)
        return 2
    if args.k is not None and args.k < 1:
        print("luna memory search: -k must be at least 1", file=sys.stderr)
        return 2
    if args.k is not None and args.k > MAX_K:
        print(f"note: -k {args.k} is past the limit; showing at most {MAX_K}", file=sys.stderr)
        args.k = MAX_K
    if args.batch is not None:
        try:
            text = await asyncio.to_thread(args.batch.read_text, encoding="utf-8")
        except OSError as e:
            print(
                f"luna memory search: cannot read {args.batch}: {e.strerror or e}", file=sys.stderr
            )
            return 2
        except UnicodeDecodeError as e:
            print(
                f"luna memory search: {args.batch} is not UTF-8 text (byte {e.start}); --batch "
                "wants one query per line",
                file=sys.stderr,
            )
            return 2
        queries = [q.strip() for q in text.split("\n") if q.strip()]
        if any("\x00" in q for q in queries):
            print(
                f"luna memory search: {args.batch} holds binary data (NUL bytes)", file=sys.stderr
            )
            return 2
    else:
        queries = [args.query]
    async with open_memory(cfg) as mem:
        # What was just added is embedded now; a backlog (an interrupted reindex: every
        # vector) is left to `reindex` or the running Luna, never waited for here.
        await mem.flush_index(limit=SEARCH_EMBEDS)
        left = 0
        if mem.vector_enabled:  # docs without a vector yet: found by keyword only
            counts = await asyncio.to_thread(mem.store.counts)
            left = counts["indexed"] - counts["embedded"]
        if left:
            print(
                f"note: {left} item(s) have no vector yet, so they are found by keyword only; "
                "`luna memory reindex` (or a running Luna) embeds them",
                file=sys.stderr,
            )
        for query in queries:
            items = await mem.recall(query, scope=args.scope, k=args.k)
            if args.json:
                print(
                    terminal_json({"query": query, "results": [recall_json(i) for i in items]}),
                    flush=True,
                )
                continue
            if len(queries) > 1:
                print(neutralize(f"== {query}"))
            if not items:
                print("(nothing found)")
            for it in items:
                ident = it.external_id if it.external_id is not None else it.id
                print(
                    neutralize(
                        f"{it.kind:<7} {ident!s:<8} {it.score:6.3f}  {it.created_at[:10]}  "
                        f"[{it.source}] {' '.join(it.text.split())[:200]}"
                    )
                )
    return 0


async def list_cmd(args: argparse.Namespace, cfg: Config) -> int:
    async with open_memory(cfg) as mem:
        rows = await mem.list_memories(scope=args.scope, limit=args.limit)
    for r in rows:
        if args.json:
            print(terminal_json(r))
            continue
        flag = f" (superseded by #{r['superseded_by']})" if r["superseded_by"] else ""
        print(
            neutralize(
                f"#{r['id']:<6} imp {r['importance']:>2}  {r['created_at'][:10]}  "
                f"{r['scope']:<10} [{r['source']}] {r['text']}{flag}"
            )
        )
    if not rows and not args.json:
        print("(no memories)")
    return 0


async def add_cmd(args: argparse.Namespace, cfg: Config) -> int:
    if not 1 <= args.importance <= 10:
        print("luna memory add: --importance must be 1-10", file=sys.stderr)
        return 2
    async with open_memory(cfg) as mem:
        mem_id = await mem.add_memory(args.text, importance=args.importance, scope=args.scope)
    print(f"remembered #{mem_id}")
    return 0


async def forget_cmd(args: argparse.Namespace, cfg: Config) -> int:
    async with open_memory(cfg) as mem:
        found = await mem.forget(args.id)
    print(f"forgot #{args.id}" if found else f"no memory #{args.id}")
    return 0 if found else 1


async def prepare_cmd(args: argparse.Namespace, cfg: Config) -> int:
    from luna.memory.embedding.prepared import prepare_now

    return await asyncio.to_thread(prepare_now, cfg.memory)


async def stats_cmd(args: argparse.Namespace, cfg: Config) -> int:
    async with open_memory(cfg) as mem:
        stats = await mem.stats()
    if args.json:
        print(terminal_json(stats))
    else:
        for key, value in stats.items():
            print(neutralize(f"{key:<16} {value}"))
    return 0


class ReindexProgress:
    """The bar of :mod:`luna.observe.progress` on a terminal; otherwise one line every
    ``PROGRESS_EVERY_S`` (a log file or a pipe gets no carriage returns)."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream or sys.stderr
        self.bar: Any = None
        self.done = self.total = self.resumed = 0
        self.start = self.last = time.monotonic()

    def started(self, done: int, total: int) -> None:
        self.done, self.total, self.resumed = done, total, done
        if done:
            print(f"reindex: resuming, {done} of {total} docs embedded already", file=self.stream)
        if self.stream.isatty():
            self.bar = progress_bar(total=total, initial=done, unit="doc", desc="reindex")

    def update(self, n: int) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
            return
        now = time.monotonic()
        if now - self.last >= PROGRESS_EVERY_S or self.done >= self.total:
            self.last = now
            rate = (self.done - self.resumed) / max(now - self.start, 1e-9)
            share = 100 * self.done / max(self.total, 1)
            print(
                f"reindex: {self.done}/{self.total} docs ({share:.0f}%), {rate:.1f} docs/s",
                file=self.stream,
                flush=True,
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


async def reindex_cmd(args: argparse.Namespace, cfg: Config) -> int:
    progress = ReindexProgress()
    try:
        async with open_memory(cfg, allow_model_change=True) as mem:
            done = await reindex(mem, progress=progress.update, started=progress.started)
    finally:
        progress.close()
    print(
        f"re-embedded {done} items with {cfg.memory.vector_model} ({cfg.memory.embedding_dim} dims)"
    )
    return 0


def _has_lone_surrogate(value: Any) -> bool:
    """A string (or a string inside a list/dict) that cannot be stored as UTF-8; walked
    without recursion, so no nesting depth can raise."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if clean_text(item) != item:
                return True
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
    return False


def content_id(record: dict[str, Any]) -> str:
    """A stable id for a line without one, from what it says (text, time, speaker, session,
    source): importing the same file again finds it already there instead of a duplicate."""
    key = [record[k] for k in ("text", "created_at", "speaker", "session_id", "source")]
    digest = hashlib.sha256(json.dumps(key, ensure_ascii=False).encode()).hexdigest()
    return f"sha256:{digest[:24]}"


def parse_import_line(line: str, default_session: str, scope: str) -> dict[str, Any]:
    """One JSONL line -> a memory record; ValueError says what is wrong."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"not valid JSON ({e.msg})") from None
    except RecursionError:
        raise ValueError("nested too deeply to be a memory") from None
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    if _has_lone_surrogate(obj):  # e.g. "\ud800": valid JSON, but no UTF-8 text
        raise ValueError("holds a lone surrogate escape (like \\ud800), which is not text")
    text = obj.get("text")
    if not isinstance(text, str) or not text.strip():
        raise ValueError('"text" is required and must be a non-empty string')
    ext = obj.get("id")
    if ext is not None and not isinstance(ext, str | int) or isinstance(ext, bool):
        raise ValueError('"id" must be a string or an integer')
    created = obj.get("created_at")
    if created is not None:
        if not isinstance(created, str):
            raise ValueError('"created_at" must be an ISO 8601 string')
        try:
            created = normalize_timestamp(created)
        except ValueError:
            raise ValueError(f'"created_at" is not ISO 8601: {created!r}') from None
        except OverflowError:  # e.g. 0001-01-01T00:00:00+05:00 is before year 1 in UTC
            raise ValueError(f'"created_at" is out of range: {created!r}') from None
    source = obj.get("source", "import")
    if source not in SOURCES:
        raise ValueError(f'"source" must be one of {", ".join(SOURCES)}')
    speaker = obj.get("speaker")
    session = obj.get("session") or default_session
    record = {
        "text": text,
        "id": None if ext is None else str(ext),
        "created_at": created,
        "source": source,
        "speaker": str(speaker) if speaker else None,
        "session_id": str(session),
        "scope": scope,
        "importance": 5,
    }
    if record["id"] is None:
        record["id"] = content_id(record)
    return record


def _read_lines(path: Path) -> list[bytes]:
    """The file's lines, split on ``\n`` only (see the module invariants)."""
    return path.read_bytes().split(b"\n")


async def import_cmd(args: argparse.Namespace, cfg: Config) -> int:
    from tqdm import tqdm

    try:
        lines = await asyncio.to_thread(_read_lines, args.file)
    except OSError as e:
        print(f"luna memory import: cannot read {args.file}: {e.strerror or e}", file=sys.stderr)
        return 2
    if lines and not lines[-1].strip():
        lines.pop()  # the newline that ends the last line
    default_session = f"import:{args.file.name}"
    imported = skipped = existing = 0
    batch: list[dict[str, Any]] = []
    async with open_memory(cfg) as mem:
        try:
            with progress_bar(total=len(lines), unit="line", desc="import") as bar:

                async def flush() -> None:
                    nonlocal imported, existing
                    if batch:
                        ids, dup = await mem.add_memories(batch)
                        imported += len(ids)
                        existing += dup
                        bar.update(len(batch))
                        batch.clear()

                for number, raw in enumerate(lines, start=1):
                    if not raw.strip():
                        bar.update(1)
                        continue
                    if len(raw) > MAX_LINE_BYTES:  # never parsed: JSON of 20 MB took 1.5 GB
                        skipped += 1
                        bar.update(1)
                        tqdm.write(
                            f"{args.file}:{number}: skipped: {len(raw):,} bytes, over the "
                            f"{MAX_LINE_BYTES:,}-byte limit of a line",
                            file=sys.stderr,
                        )
                        continue
                    try:
                        line = raw.decode("utf-8")
                        batch.append(parse_import_line(line, default_session, args.scope))
                    except UnicodeDecodeError as e:
                        skipped += 1
                        bar.update(1)
                        tqdm.write(
                            f"{args.file}:{number}: skipped: not UTF-8 (byte {e.start})",
                            file=sys.stderr,
                        )
                        continue
                    except ValueError as e:
                        skipped += 1
                        bar.update(1)
                        tqdm.write(f"{args.file}:{number}: skipped: {e}", file=sys.stderr)
                        continue
                    if len(batch) >= IMPORT_BATCH:
                        await flush()
                await flush()
        except LunaError as e:
            print(f"luna memory import: {e}", file=sys.stderr)
            return 1
    print(f"imported {imported}, skipped {skipped} malformed line(s), {existing} already present")
    return 1 if skipped else 0
