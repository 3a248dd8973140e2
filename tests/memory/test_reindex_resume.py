"""A model change: every vector keeps its model, a reindex killed with ``kill -9`` resumes
where it stopped (never starts over), a Luna on the old model goes keyword-only when the
vectors change under it, one on the new model answers from FTS for what has no vector yet;
and the migration that records the model, on a blank and an old database."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from luna.config import MemoryConfig
from luna.memory import Memory
from luna.memory.storage.migrations import MIGRATIONS
from luna.memory.storage.store import Store, VectorModelChangedError
from tests.fakes.embed_server import DIM, EmbedServer
from tests.luna_process import clean_env

DOCS = 400
BATCH = 16  # per request, each committed as it comes back


@pytest.fixture
def server() -> Iterator[EmbedServer]:
    s = EmbedServer()
    yield s
    s.close()


def cfg(server: EmbedServer, tmp_path: Path, model: str) -> MemoryConfig:
    return MemoryConfig(
        db_path=tmp_path / "data" / "luna.db",
        embedding_endpoint=server.url,
        embedding_endpoint_model=model,
        embedding_dim=DIM,
        embedding_batch_size=BATCH,
    )


def models(db: Path) -> dict[str | None, int]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT embed_model, count(*) FROM docs WHERE embedded = 1 GROUP BY 1"
        ).fetchall()
    return dict(rows)


def reindex(tmp_path: Path, server: EmbedServer) -> subprocess.Popen[str]:
    (tmp_path / "config.toml").write_text(
        "[memory]\n"
        f'db_path = "data/luna.db"\nembedding_endpoint = "{server.url}"\n'
        f'embedding_endpoint_model = "model-b"\nembedding_dim = {DIM}\n'
        f"embedding_batch_size = {BATCH}\n"
    )
    return subprocess.Popen(
        [sys.executable, "-m", "luna", "memory", "reindex"],
        cwd=tmp_path,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def test_reindex_resumes_after_kill_9(
    server: EmbedServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    old = Memory(cfg(server, tmp_path, "model-a"))
    await old.open(background=False)
    await old.add_memories([{"text": f"fact number {i} about room {i % 9}"} for i in range(DOCS)])
    assert models(old.cfg.db_path) == {"model-a": DOCS}
    await old.close()
    running_old = Memory(cfg(server, tmp_path, "model-a"))  # a Luna left on the old model
    await running_old.open()
    assert await running_old.encoder.wait_ready()

    server.delay = 0.2
    server.requests.clear()
    proc = reindex(tmp_path, server)
    deadline = time.monotonic() + 60
    while models(old.cfg.db_path).get("model-b", 0) < 128:  # 8 requests committed
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
        await asyncio.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    await asyncio.to_thread(proc.wait, 10)
    first_requests = len(server.requests)
    done_before = models(old.cfg.db_path).get("model-b", 0)
    assert "model-a" not in models(old.cfg.db_path)  # never two models side by side
    assert 128 <= done_before < DOCS and done_before % BATCH == 0

    # The Luna on model-a sees its vectors gone: keyword-only, said once.
    with caplog.at_level(logging.WARNING, logger="luna.memory"):
        items = await running_old.recall("fact number 7 about room 7")
        await running_old.recall("room 3")
    assert running_old.recall_mode == "fts" and items
    said = [r for r in caplog.records if "keyword-only (fts) until Luna restarts" in r.message]
    assert len(said) == 1
    with pytest.raises(VectorModelChangedError):  # its indexer could not store model-a's
        running_old.store.store_vectors([(1, "owner", b"\0" * 4 * DIM)])
    await running_old.close()

    # A Luna on model-b meanwhile: vectors for what is re-embedded, FTS finds the rest.
    new = Memory(cfg(server, tmp_path, "model-b"))
    await new.open(background=False)
    hits = await new.recall(f"fact number {DOCS - 1} about room {(DOCS - 1) % 9}")
    assert any(f"fact number {DOCS - 1} " in i.text for i in hits)  # not embedded yet: FTS
    await new.close()

    server.delay = 0.0
    server.requests.clear()
    start = time.monotonic()
    proc = reindex(tmp_path, server)
    out, err = await asyncio.to_thread(proc.communicate, None, 120)
    assert proc.returncode == 0, err
    seconds = time.monotonic() - start
    assert f"reindex: resuming, {done_before} of {DOCS} docs embedded already" in err
    assert f"re-embedded {DOCS - done_before} items with model-b" in out
    assert models(old.cfg.db_path) == {"model-b": DOCS}
    # the probe, then only what was left, BATCH per request
    left = DOCS - done_before
    assert len(server.requests) == 1 + -(-left // BATCH)
    print(
        f"\nkill -9 after {done_before}/{DOCS} docs ({first_requests} requests); "
        f"resumed: {left} docs in {len(server.requests)} requests, {seconds:.1f} s"
    )
    assert "\r" not in err  # not a terminal: lines, no bar
    done = Memory(cfg(server, tmp_path, "model-b"))
    await done.open(background=False)
    assert done.store.get_meta("reindex_model") is None
    await done.close()


def test_vector_model_migration_on_blank_and_old_database(tmp_path: Path) -> None:
    blank = Store(tmp_path / "blank.db")
    blank.migrate()
    assert "embed_model" in {r[1] for r in blank.query("PRAGMA table_info(docs)")}
    blank.close()
    old = Store(tmp_path / "old.db")
    old.migrate(MIGRATIONS[:7])
    old.set_meta("embedding_model", "all-MiniLM-L6-v2")
    with old.transaction() as conn:
        for embedded in (1, 0):
            conn.execute(
                "INSERT INTO docs (kind, ref_id, scope, created_at, embedded) "
                "VALUES ('memory', ?, 'owner', '2026-01-01', ?)",
                (embedded + 10, embedded),
            )
    assert old.migrate(MIGRATIONS[:8]) == ["m008_vector_model"]
    rows: list[Any] = old.query("SELECT embedded, embed_model FROM docs ORDER BY embedded")
    assert rows == [(0, None), (1, "all-MiniLM-L6-v2")]
    old.close()


def test_reindex_progress_bar_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from luna.memory import cli

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    from luna.observe import progress

    tty = Terminal()
    monkeypatch.setattr(sys, "stderr", tty)  # the bar's rule looks at stderr
    monkeypatch.setattr(progress, "DELAY_S", 0.0)  # drawn at once, not after a second
    bar = cli.ReindexProgress(tty)
    bar.started(0, 300)
    for _ in range(3):
        bar.update(100)
    bar.close()
    assert "\r" in tty.getvalue() and "300/300" in tty.getvalue()

    monkeypatch.setattr(cli, "PROGRESS_EVERY_S", 3600.0)
    log = io.StringIO()
    lines = cli.ReindexProgress(log)
    lines.started(100, 300)
    lines.update(100)  # within PROGRESS_EVERY_S: nothing
    lines.update(100)  # the last: always said
    lines.close()
    assert log.getvalue().splitlines()[0] == "reindex: resuming, 100 of 300 docs embedded already"
    assert len(log.getvalue().splitlines()) == 2 and "\r" not in log.getvalue()
    assert log.getvalue().splitlines()[1].startswith("reindex: 300/300 docs (100%)")
