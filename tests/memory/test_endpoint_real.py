"""The embedding endpoint against the real llama-server (``--embedding --pooling mean``, the
Gemma 3 270M GGUF: 640-dim vectors, poor ones, but the wire, batching, dimensions and failure
paths are real). One server for the module; the last test kills it and starts it again."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from luna.config import MemoryConfig
from luna.config.loader import build_config
from luna.doctor.embedding import check_embedding_endpoint
from luna.memory import Memory
from luna.memory.embedding import endpoint as endpoint_mod
from luna.memory.embedding.endpoint import EndpointDimError, EndpointEncoder
from tests.real_llama import RealLlama, model_path

DIM = 640  # Gemma 3 270M's hidden size
DOCS = 64  # about 4.5 docs/s on this (shared, 2-core) box: see the printed figure


class CountingProxy:
    """Forwards every request to the real server unchanged and counts them (the server's log
    does not name requests). While the server is down it drops the connection, as a dead one
    does."""

    def __init__(self, target: RealLlama) -> None:
        self.target = target
        self.count = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                proxy.count += 1
                try:
                    r = httpx.post(
                        f"{proxy.target.root_url}{self.path}",
                        content=body,
                        headers={"Content-Type": "application/json"},
                        timeout=300,
                    )
                    status, out = r.status_code, r.content
                except httpx.TransportError:
                    self.close_connection = True
                    self.connection.shutdown(2)  # as a dead server does: no answer
                    return
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealLlama]:
    base = tmp_path_factory.mktemp("llama-embed")
    llama = RealLlama(
        model_path(base / "models"),
        base / "llama-embed.log",
        ctx=2048,  # one thread, one slot: the fastest measured on this box (-t 2 -np 4: 7x slower)
        extra=("--embedding", "--pooling", "mean", "-t", "1", "--log-verbosity", "2"),
    ).start()
    yield llama
    llama.stop()


@pytest.fixture(scope="module")
def proxy(server: RealLlama) -> Iterator[CountingProxy]:
    p = CountingProxy(server)
    yield p
    p.close()


@pytest.fixture(autouse=True)
def _fast_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(endpoint_mod, "PROBE_S", 0.1)
    monkeypatch.setattr(endpoint_mod, "PROBE_MAX_S", 0.5)


def memory_cfg(proxy: CountingProxy, tmp_path: Path, **kw: Any) -> MemoryConfig:
    values: dict[str, Any] = {
        "db_path": tmp_path / "luna.db",
        "embedding_endpoint": proxy.url,
        "embedding_endpoint_model": "gemma-3-270m",
        "embedding_dim": DIM,
        "embedding_batch_size": 16,
        "embedding_timeout": 120.0,
        "embedding_retries": 1,
        **kw,
    }
    return MemoryConfig(**values)


async def test_real_endpoint_batches(proxy: CountingProxy, tmp_path: Path) -> None:
    mem = Memory(memory_cfg(proxy, tmp_path))
    await mem.open(background=False)
    before = proxy.count
    records = [{"text": f"note {i}: the parcel number {i * 7} went to room {i % 40}"}
               for i in range(DOCS)]  # fmt: skip
    start = time.perf_counter()
    ids, _ = await mem.add_memories(records)
    seconds = time.perf_counter() - start
    stats = await mem.stats()
    requests = proxy.count - before
    print(f"\n{DOCS} docs: {requests} requests, {seconds:.2f} s, {DOCS / seconds:.1f} docs/s")
    assert len(ids) == DOCS and stats["embedded"] == DOCS
    assert requests == DOCS // 16 == mem.encoder.requests  # one per batch, no retries
    vecs = await mem.encoder.encode(["the parcel went to room 3", "room 3"], is_query=True)
    assert vecs.dtype == np.float32 and vecs.shape == (2, DIM)
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    items = await mem.recall("which room did parcel 70 go to")
    assert items
    await mem.close()


async def test_real_endpoint_wrong_dimension_refused(
    proxy: CountingProxy, server: RealLlama, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    enc = EndpointEncoder(memory_cfg(proxy, tmp_path, embedding_dim=384))
    with pytest.raises(EndpointDimError) as info:
        await enc.encode(["hello"])
    await enc.close()
    msg = str(info.value)
    assert "returned 640-dim vectors but memory.embedding_dim is 384" in msg
    assert "set memory.embedding_dim = 640" in msg and "\n" not in msg
    caplog.clear()
    mem = Memory(memory_cfg(proxy, tmp_path, embedding_dim=384))
    with caplog.at_level(logging.ERROR):
        await mem.open()
        await mem.append_message("s", {"role": "user", "content": "the vault code is 4711"})
        assert not await mem.encoder.wait_ready()
    assert (await mem.stats())["embedded"] == 0  # never stored
    assert mem.recall_mode == "fts"
    assert [i.text for i in await mem.recall("vault code")] == ["the vault code is 4711"]
    errors = [r.getMessage() for r in caplog.records if "640-dim" in r.getMessage()]
    assert len(errors) == 1
    await mem.close()


async def test_real_endpoint_killed_then_restarted(
    proxy: CountingProxy, server: RealLlama, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = memory_cfg(proxy, tmp_path)
    mem = Memory(cfg)
    await mem.open()
    assert await mem.encoder.wait_ready()
    await mem.append_message("s", {"role": "user", "content": "my sister lives in Porto"})
    await wait_embedded(mem, 1)
    assert mem.recall_mode == "hybrid"

    server.stop()  # killed mid-run
    with caplog.at_level(logging.WARNING, logger="luna.memory.embedding.endpoint"):
        await mem.append_message("s", {"role": "user", "content": "my brother moved to Lyon"})
        await asyncio.sleep(0.5)  # the indexer tries, retries, gives up
        items = await mem.recall("where did my brother move, Lyon?")
    assert mem.recall_mode == "fts"
    assert any("Lyon" in i.text for i in items)
    assert (await mem.stats())["embedded"] == 1
    down = [r.getMessage() for r in caplog.records if "keyword-only (fts)" in r.getMessage()]
    assert len(down) == 1 and "unreachable" in down[0]
    doctor_cfg = build_config(
        {"memory": {k: getattr(cfg, k) for k in ("embedding_endpoint", "embedding_dim")}
         | {"embedding_endpoint_model": "gemma-3-270m"}},
        {},
        base_dir=tmp_path,
    )  # fmt: skip
    (check,) = await check_embedding_endpoint(doctor_cfg)
    assert check.ok is False and "unreachable" in check.detail
    assert "llama-server --embedding" in check.fix

    start = time.perf_counter()
    server.start()  # the same port: the probe finds it, the indexer embeds what was left
    await wait_embedded(mem, 2, within=60)
    print(f"\nvectors resumed {time.perf_counter() - start:.1f} s after the restart began")
    assert mem.recall_mode == "hybrid"
    (check,) = await check_embedding_endpoint(doctor_cfg)
    assert check.ok and "640 dims" in check.detail
    await mem.close()


async def wait_embedded(mem: Memory, n: int, within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while (await mem.stats())["embedded"] < n:
        if time.monotonic() > deadline:
            raise AssertionError(f"not embedded: {await mem.stats()}")
        await asyncio.sleep(0.1)
