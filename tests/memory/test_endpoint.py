"""The embedding endpoint client against a tiny real HTTP server: batching, retry with backoff
on 5xx and dropped connections, timeouts, wrong dimensions, 4xx, the key, the prefixes; and the
facade's keyword-only fallback while the endpoint is down (the real llama-server runs in
tests/memory/test_endpoint_real.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from luna.config import MemoryConfig
from luna.config.loader import build_config, secret_values
from luna.errors import ConfigError
from luna.memory import Memory
from luna.memory.embedding import endpoint as endpoint_mod
from luna.memory.embedding.endpoint import (
    EndpointAnswerError,
    EndpointDimError,
    EndpointDownError,
    EndpointEncoder,
)
from tests.fakes.embed_server import DIM, EmbedServer, fake_vector


@pytest.fixture
def server() -> Iterator[EmbedServer]:
    s = EmbedServer()
    yield s
    s.close()


@pytest.fixture(autouse=True)
def _fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(endpoint_mod, "BACKOFF_S", 0.01)
    monkeypatch.setattr(endpoint_mod, "PROBE_S", 0.05)
    monkeypatch.setattr(endpoint_mod, "PROBE_MAX_S", 0.2)


def cfg_for(url: str, tmp_path: Any, **kw: Any) -> MemoryConfig:
    values: dict[str, Any] = {
        "db_path": tmp_path / "luna.db",
        "embedding_endpoint": url,
        "embedding_endpoint_model": "test-embed",
        "embedding_dim": DIM,
        "embedding_batch_size": 8,
        "embedding_timeout": 2.0,
        "embedding_retries": 2,
        **kw,
    }
    return MemoryConfig(**values)


async def test_endpoint_batches_and_normalizes(server: EmbedServer, tmp_path: Any) -> None:
    enc = EndpointEncoder(cfg_for(server.url, tmp_path))
    texts = [f"text {i}" for i in range(20)]
    vecs = await enc.encode(texts)
    await enc.close()
    assert vecs.dtype == np.float32 and vecs.shape == (20, DIM)
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert [len(r["input"]) for r in server.requests] == [8, 8, 4]
    assert server.requests[0]["model"] == "test-embed"
    # the answer came back in reverse order: rows follow "index", not the order received
    want = np.asarray(fake_vector("text 3", DIM), dtype=np.float32)
    assert np.allclose(vecs[3], want / np.linalg.norm(want), atol=1e-6)


async def test_endpoint_retries_5xx_and_dropped_connections(
    server: EmbedServer, tmp_path: Any
) -> None:
    server.script.extend([503, "drop"])
    enc = EndpointEncoder(cfg_for(server.url, tmp_path))
    vecs = await enc.encode(["hello"])
    assert vecs.shape == (1, DIM)
    assert len(server.requests) == 3 and enc.requests == 3
    server.script.extend([500, 502, 504])  # retries = 2: three tries, then down
    with pytest.raises(EndpointDownError, match="unreachable: HTTP 504"):
        await enc.encode(["again"])
    assert enc.is_down and enc.state in ("down", "warming")
    await enc.close()


async def test_endpoint_times_out(server: EmbedServer, tmp_path: Any) -> None:
    server.script.extend([("sleep", 1.0)] * 3)
    enc = EndpointEncoder(cfg_for(server.url, tmp_path, embedding_timeout=0.2))
    start = time.monotonic()
    with pytest.raises(EndpointDownError, match="no answer within 0.2 s"):
        await enc.encode(["slow"])
    assert time.monotonic() - start < 2.0
    await enc.close()


async def test_endpoint_refuses_wrong_dimension_in_one_line(
    server: EmbedServer, tmp_path: Any
) -> None:
    server.dim = DIM * 2
    enc = EndpointEncoder(cfg_for(server.url, tmp_path))
    with pytest.raises(EndpointDimError) as info:
        await enc.encode(["x"])
    msg = str(info.value)
    assert "\n" not in msg and f"set memory.embedding_dim = {DIM * 2}" in msg
    assert enc.is_failed and not enc.is_down  # final: a configuration error
    assert len(server.requests) == 1  # never retried
    await enc.close()


async def test_endpoint_4xx_is_final_and_key_is_sent(server: EmbedServer, tmp_path: Any) -> None:
    server.script.append(401)
    enc = EndpointEncoder(cfg_for(server.url, tmp_path, embedding_endpoint_key="s3cret-key"))
    with pytest.raises(EndpointAnswerError, match="HTTP 401; check memory.embedding_endpoint"):
        await enc.encode(["x"])
    assert "s3cret-key" not in str(enc.error)
    assert server.headers[0]["Authorization"] == "Bearer s3cret-key"
    assert len(server.requests) == 1
    await enc.close()


async def test_endpoint_prefixes_configured_and_nomic_default(
    server: EmbedServer, tmp_path: Any
) -> None:
    enc = EndpointEncoder(
        cfg_for(server.url, tmp_path, embedding_endpoint_model="nomic-embed-text-v1.5")
    )
    await enc.encode(["a doc"])
    await enc.encode(["a question"], is_query=True)
    await enc.close()
    enc = EndpointEncoder(
        cfg_for(
            server.url,
            tmp_path,
            embedding_query_prefix="query: ",
            embedding_document_prefix="passage: ",
        )
    )
    await enc.encode(["a doc"])
    await enc.encode(["a question"], is_query=True)
    await enc.close()
    assert [r["input"][0] for r in server.requests] == [
        "search_document: a doc",
        "search_query: a question",
        "passage: a doc",
        "query: a question",
    ]


def test_endpoint_key_comes_from_the_named_variable_only(tmp_path: Any) -> None:
    memory = {
        "embedding_endpoint": "http://gpu:8080/v1/",
        "embedding_endpoint_model": "m",
        "embedding_endpoint_key_env": "EMBED_KEY",
    }
    cfg = build_config({"memory": memory}, {"EMBED_KEY": "k-123456"}, base_dir=tmp_path)
    assert cfg.memory.embedding_endpoint == "http://gpu:8080/v1"
    assert cfg.memory.embedding_endpoint_key == "k-123456"
    assert "k-123456" in secret_values(cfg)  # so tool subprocesses never get it
    assert "k-123456" not in repr(cfg.memory)
    with pytest.raises(ConfigError, match="is a secret"):
        build_config({"memory": {**memory, "embedding_endpoint_key": "x"}}, {}, base_dir=tmp_path)
    with pytest.raises(ConfigError, match="embedding_endpoint_model"):
        build_config({"memory": {"embedding_endpoint": "http://gpu/v1"}}, {}, base_dir=tmp_path)


async def test_memory_falls_back_to_fts_while_endpoint_is_down(
    server: EmbedServer, tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = cfg_for(server.url, tmp_path)
    mem = Memory(cfg)
    await mem.open()
    assert await mem.encoder.wait_ready()
    sid = "s1"
    await mem.append_message(sid, {"role": "user", "content": "my cat is called Miso"})
    for _ in range(100):
        if (await mem.stats())["embedded"] == 1:
            break
        await asyncio.sleep(0.02)
    assert mem.recall_mode == "hybrid"
    server.script.extend([503] * 50)  # down: every try fails
    with caplog.at_level(logging.WARNING, logger="luna.memory.embedding.endpoint"):
        await mem.append_message(sid, {"role": "user", "content": "the dog is called Pepper"})
        items = await mem.recall("what is the dog called Pepper")
        await mem.recall("what is the cat called")
    assert mem.recall_mode == "fts"
    assert any("Pepper" in i.text for i in items)  # FTS finds it without its vector
    down = [r for r in caplog.records if "keyword-only" in r.getMessage()]
    assert len(down) == 1 and "\n" not in down[0].getMessage()
    assert (await mem.stats())["embedded"] == 1  # no vector stored for the second message
    server.script.clear()  # back: the probe sees it and the indexer embeds what was left
    for _ in range(200):
        if (await mem.stats())["embedded"] == 2:
            break
        await asyncio.sleep(0.05)
    assert (await mem.stats())["embedded"] == 2
    assert mem.recall_mode == "hybrid"
    await mem.close()


async def test_doctor_endpoint_check_ok_down_and_wrong_dim(
    server: EmbedServer, tmp_path: Any
) -> None:
    from luna.doctor.embedding import check_embedding_endpoint

    memory = {
        "embedding_endpoint": server.url,
        "embedding_endpoint_model": "test-embed",
        "embedding_dim": DIM,
        "embedding_endpoint_key_env": "EMBED_KEY",
    }
    cfg = build_config({"memory": memory}, {}, base_dir=tmp_path)
    key, result = await check_embedding_endpoint(cfg)
    assert key.ok is False and not key.essential and "EMBED_KEY" in key.detail
    assert result.ok and f"model 'test-embed', {DIM} dims" in result.detail
    server.script.append(503)
    (result,) = await check_embedding_endpoint(
        cfg.model_copy(
            update={"memory": cfg.memory.model_copy(update={"embedding_endpoint_key": "k"})}
        )
    )
    assert result.ok is False and not result.essential  # ⚠: keyword-only meanwhile
    assert "unreachable: HTTP 503" in result.detail and "llama-server --embedding" in result.fix
    server.dim = 8
    cfg = build_config(
        {"memory": {**memory, "embedding_endpoint_key_env": ""}}, {}, base_dir=tmp_path
    )
    (result,) = await check_embedding_endpoint(cfg)
    assert result.failed and "set memory.embedding_dim = 8" in result.detail


async def test_endpoint_query_gets_one_short_try(
    server: EmbedServer, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(endpoint_mod, "QUERY_TIMEOUT_S", 0.2)
    server.script.extend([("sleep", 1.0)] * 3)
    enc = EndpointEncoder(cfg_for(server.url, tmp_path, embedding_timeout=5.0))
    start = time.monotonic()
    with pytest.raises(EndpointDownError, match="no answer within 0.2 s"):
        await enc.encode(["where is the key?"], is_query=True)
    assert time.monotonic() - start < 0.8 and len(server.requests) == 1  # no retries
    assert enc.is_down
    await enc.close()


def test_prefix_rule_has_one_owner_for_both_encoders(tmp_path: Any) -> None:
    from luna.memory.embedding.encoder import Encoder
    from luna.memory.embedding.models import text_prefixes

    nomic = ("search_query: ", "search_document: ")
    assert text_prefixes("nomic-ai/nomic-embed-text-v1.5") == nomic
    assert text_prefixes("all-MiniLM-L6-v2") == ("", "")
    assert text_prefixes("nomic-embed-text", "q: ", "") == ("q: ", "")  # configured wins
    local = MemoryConfig(
        db_path=tmp_path / "luna.db",
        embedding_model="nomic-ai/nomic-embed-text-v1.5",
        embedding_dim=256,
        embedding_process=False,
    )
    assert Encoder(local).prefixes == nomic  # constructing loads nothing
    custom = local.model_copy(update={"embedding_document_prefix": "passage: "})
    assert Encoder(custom).prefixes == ("", "passage: ")
