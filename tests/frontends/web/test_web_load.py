"""20 concurrent streaming clients (the real ``openai`` SDK) against a real ``python -m luna
web`` process and the scripted LLM: every client gets its own reply, complete and in order,
while the page's API keeps answering. The figures are printed and saved as
test-artifacts/web/concurrency.json."""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI

from luna.observe.stats import percentile
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.frontends.web.conftest import TOKEN
from tests.frontends.web.process import LunaWebProcess, artifacts_dir

CLIENTS = 20
WORDS = 40  # words per reply, streamed 4 characters at a time
pytestmark = pytest.mark.timeout(600)


def answer_for(n: str) -> str:
    return " ".join(f"c{n}w{i}" for i in range(WORDS))


def scripted(body: dict[str, Any]) -> Reply:
    """Each client's reply names the client, so a mixed-up stream shows."""
    last = str(body["messages"][-1].get("content") or "")
    match = re.search(r"client (\d+) says hello", last)
    n = match.group(1) if match else "?"
    return Reply(content=answer_for(n), chunk_size=4, chunk_delay=0.01)


@pytest.fixture
def luna_web(tmp_path: Path) -> Iterator[tuple[LunaWebProcess, FakeLLMServer]]:
    with FakeLLMServer() as server:
        server.default = scripted
        proc = LunaWebProcess(tmp_path, server.url, "[memory]\nlibrarian = false\n").start()
        try:
            yield proc, server
        finally:
            assert proc.stop() == 0, "".join(proc.stderr)


async def one_client(url: str, n: int) -> dict[str, Any]:
    client = AsyncOpenAI(api_key=TOKEN, base_url=f"{url}/v1", max_retries=0, timeout=120)
    started = time.perf_counter()
    first: float | None = None
    pieces: list[str] = []
    stream = await client.chat.completions.create(
        model="luna",
        messages=[{"role": "user", "content": f"client {n} says hello"}],
        stream=True,
        user=f"load-{n}",
    )
    async for chunk in stream:
        for choice in chunk.choices:
            if choice.delta.content:
                if first is None:
                    first = time.perf_counter() - started
                pieces.append(choice.delta.content)
    await client.close()
    return {
        "n": n,
        "text": "".join(pieces),
        "chunks": len(pieces),
        "first_s": first,
        "total_s": time.perf_counter() - started,
    }


async def probe(url: str, stop: asyncio.Event) -> list[float]:
    """The page's own API while the streams run: milliseconds per request."""
    out: list[float] = []
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
        while not stop.is_set():
            t = time.perf_counter()
            assert (await client.get("/api/sessions")).status_code == 200
            out.append((time.perf_counter() - t) * 1000)
            await asyncio.sleep(0.05)
    return out


async def test_twenty_concurrent_streaming_clients(
    luna_web: tuple[LunaWebProcess, FakeLLMServer],
) -> None:
    proc, server = luna_web
    await one_client(proc.url, 999)  # warm-up: embedding model loaded, caches filled
    stop = asyncio.Event()
    prober = asyncio.create_task(probe(proc.url, stop))
    started = time.perf_counter()
    results = await asyncio.gather(*(one_client(proc.url, n) for n in range(CLIENTS)))
    wall = time.perf_counter() - started
    stop.set()
    api_ms = await prober
    for r in results:
        assert r["text"] == answer_for(str(r["n"])), f"client {r['n']} got someone else's reply"
        assert r["chunks"] > 10
    firsts = [r["first_s"] * 1000 for r in results]
    totals = [r["total_s"] * 1000 for r in results]
    figures = {
        "clients": CLIENTS,
        "reply_chars": len(answer_for("10")),
        "wall_s": round(wall, 2),
        "first_token_ms": {
            "p50": round(percentile(firsts, 50) or 0),
            "p95": round(percentile(firsts, 95) or 0),
            "max": round(max(firsts)),
        },
        "complete_reply_ms": {
            "p50": round(percentile(totals, 50) or 0),
            "p95": round(percentile(totals, 95) or 0),
            "max": round(max(totals)),
        },
        "page_api_during_ms": {
            "requests": len(api_ms),
            "median": round(statistics.median(api_ms)) if api_ms else None,
            "max": round(max(api_ms)) if api_ms else None,
        },
        "llm_requests": len(server.requests),
    }
    (artifacts_dir() / "concurrency.json").write_text(json.dumps(figures, indent=2) + "\n")
    print("\n20 concurrent streaming clients:", json.dumps(figures))
    async with httpx.AsyncClient(
        base_url=proc.url, headers={"Authorization": f"Bearer {TOKEN}"}
    ) as client:
        sessions = {s["id"]: s for s in (await client.get("/api/sessions")).json()["sessions"]}
    for n in range(CLIENTS):
        assert sessions[f"api:load-{n}"]["messages"] == 2
    assert figures["page_api_during_ms"]["max"] < 2000
