"""Embeddings from the user's own server: an OpenAI-compatible ``POST {base}/embeddings``.

``memory.embedding_endpoint`` names the base URL (llama-server ``--embedding``, vLLM, TEI,
Ollama); :class:`EndpointEncoder` gives the facade the same interface as the in-process
:class:`luna.memory.embedding.encoder.Encoder` (``is_ready``, ``load``, ``start_warming``,
``wait_ready``, ``encode``, ``failed``, ``close``).

Invariants:
- Texts go in batches of ``memory.embedding_batch_size``, one request each; every request has
  ``memory.embedding_timeout``; a connection error, a timeout or a 5xx/429 answer is tried again
  ``memory.embedding_retries`` times with exponential backoff (``BACKOFF_S`` doubling, capped at
  ``BACKOFF_MAX_S``). Decisions branch on httpx exception types and status codes only.
- Every vector returned is float32, L2-normalized, exactly ``memory.embedding_dim`` long. An
  answer of another length is refused whole (nothing of it is stored): :class:`EndpointDimError`,
  final, one line naming what to set.
- A turn's query (``is_query``) gets one try of at most ``QUERY_TIMEOUT_S``: a slow or dead
  endpoint costs a turn seconds, never the retries' minutes; that recall is keyword-only.
- Down (retries used up): :class:`EndpointDownError`, temporary. The first one logs one warning
  (recall is keyword-only, mode ``fts``) and starts a background probe that tries the endpoint
  every ``PROBE_S`` (doubling to ``PROBE_MAX_S``) until it answers; then one info line and the
  indexer embeds what was left without a vector meanwhile. ``is_ready`` is False while down.
- Any other failure (4xx, a malformed answer) is final: ``error`` is set, logged once.
- The key (from the variable ``memory.embedding_endpoint_key_env`` names) is sent as a bearer
  token and never logged; this runs in Luna's own process, so no subprocess ever sees it.
- Prefixes: :func:`luna.memory.embedding.models.text_prefixes`, the same rule as in-process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import httpx
import numpy as np

from luna.config import MemoryConfig
from luna.errors import MemoryStoreError
from luna.memory.embedding.embeddings import LoadInfo
from luna.memory.embedding.models import text_prefixes, with_prefix
from luna.observe import log_event

log = logging.getLogger(__name__)

BACKOFF_S = 0.25
BACKOFF_MAX_S = 4.0
PROBE_S = 1.0
PROBE_MAX_S = 30.0
PROBE_TEXT = "Luna embedding probe"
KEY_HINT = "; check memory.embedding_endpoint_key_env and the key in that variable"
QUERY_TIMEOUT_S = 5.0  # a turn's query vector: one try, this long at most, then keyword-only
RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class EndpointDownError(MemoryStoreError):
    """The endpoint did not answer (connection, timeout, 5xx) after every retry: temporary."""


class EndpointDimError(MemoryStoreError):
    """The endpoint's vectors are not ``memory.embedding_dim`` long: a configuration error."""


class EndpointAnswerError(MemoryStoreError):
    """The endpoint refused the request (4xx) or sent something that is not embeddings."""


def unit_rows(data: Any, dim: int, expected: int, where: str) -> np.ndarray:
    """The ``data`` list of an embeddings answer as (expected, dim) float32 unit rows."""
    if not isinstance(data, list) or len(data) != expected:
        got = len(data) if isinstance(data, list) else type(data).__name__
        raise EndpointAnswerError(f"embedding endpoint {where}: {got} vectors for {expected} texts")
    ordered = sorted(data, key=lambda d: d.get("index", 0) if isinstance(d, dict) else 0)
    try:
        rows = [np.asarray(d["embedding"], dtype=np.float32) for d in ordered]
    except (KeyError, TypeError, ValueError) as exc:
        raise EndpointAnswerError(f"embedding endpoint {where}: not an embeddings answer") from exc
    for row in rows:
        if row.ndim != 1 or len(row) != dim:
            raise EndpointDimError(
                f"embedding endpoint {where} returned {row.size}-dim vectors but "
                f"memory.embedding_dim is {dim}; set memory.embedding_dim = {row.size} "
                "and run `luna memory reindex` (nothing was stored)"
            )
    vecs = np.vstack(rows) if rows else np.zeros((0, dim), dtype=np.float32)
    if not np.isfinite(vecs).all():
        raise EndpointAnswerError(f"embedding endpoint {where}: vectors with NaN or infinity")
    norms = np.linalg.norm(vecs, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(vecs / norms, dtype=np.float32)


class EndpointEncoder:
    """One Memory's handle on a remote embedding server (see the module invariants)."""

    embedder = None  # no in-process model or worker process: the facade's properties say so
    process = None

    def __init__(self, cfg: MemoryConfig, *, transport: httpx.AsyncBaseTransport | None = None):
        self.url = f"{cfg.embedding_endpoint}/embeddings"
        self.model = cfg.vector_model
        self.dim = cfg.embedding_dim
        self.batch_size = cfg.embedding_batch_size
        self.retries = cfg.embedding_retries
        self.timeout = cfg.embedding_timeout
        self.prefixes = text_prefixes(
            self.model, cfg.embedding_query_prefix, cfg.embedding_document_prefix
        )
        self._key = cfg.embedding_endpoint_key
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self.info: LoadInfo | None = None
        self.error: MemoryStoreError | None = None
        self.is_down = False
        self.requests = 0  # requests sent (tries included), for tests and benchmarks
        self._warming: asyncio.Task[LoadInfo | None] | None = None

    @property
    def where(self) -> str:
        return f"{self.url} (model {self.model!r})"

    @property
    def is_ready(self) -> bool:
        return self.info is not None and not self.is_down and self.error is None

    @property
    def is_failed(self) -> bool:
        return self.error is not None

    @property
    def state(self) -> str:
        if self.is_ready:
            return "ready"
        if self.error is not None:
            return "failed"
        if self.is_down:
            return "down"
        if self._warming is not None and not self._warming.done():
            return "warming"
        return "cold"

    # ---- the wire --------------------------------------------------------------------

    def _http(self) -> httpx.AsyncClient:
        if self._client is None or self._client.is_closed:
            headers = {"Authorization": f"Bearer {self._key}"} if self._key else None
            self._client = httpx.AsyncClient(
                timeout=self.timeout, headers=headers, transport=self._transport
            )
        return self._client

    async def _post(self, texts: list[str], *, is_query: bool = False) -> np.ndarray:
        body = {"model": self.model, "input": texts, "encoding_format": "float"}
        delay = BACKOFF_S
        retries = 0 if is_query else self.retries
        timeout = min(self.timeout, QUERY_TIMEOUT_S) if is_query else self.timeout
        for attempt in range(retries + 1):
            self.requests += 1
            why = ""
            try:
                r = await self._http().post(self.url, json=body, timeout=timeout)
            except httpx.TimeoutException:
                why = f"no answer within {timeout:g} s"
            except httpx.TransportError as exc:
                why = f"cannot connect ({type(exc).__name__})"
            else:
                if r.status_code in RETRY_STATUS:
                    why = f"HTTP {r.status_code}"
                elif r.is_error:
                    hint = KEY_HINT if r.status_code in (401, 403) else ""
                    raise EndpointAnswerError(
                        f"embedding endpoint {self.where} refused the request: "
                        f"HTTP {r.status_code}{hint}"
                    )
                else:
                    try:
                        data = r.json()["data"]
                    except (ValueError, KeyError, TypeError) as exc:
                        raise EndpointAnswerError(
                            f"embedding endpoint {self.where}: not an embeddings answer"
                        ) from exc
                    return unit_rows(data, self.dim, len(texts), self.where)
            if attempt < retries:
                log.debug("memory: embedding endpoint %s: %s; trying again", self.url, why)
                await asyncio.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX_S)
        raise EndpointDownError(f"embedding endpoint {self.where} is unreachable: {why}")

    async def _embed(self, texts: list[str], *, is_query: bool = False) -> np.ndarray:
        parts = [
            await self._post(texts[i : i + self.batch_size], is_query=is_query)
            for i in range(0, len(texts), self.batch_size)
        ]
        if not parts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.ascontiguousarray(np.vstack(parts), dtype=np.float32)

    # ---- the Encoder interface -----------------------------------------------------

    async def load(self) -> LoadInfo:
        """Ask the endpoint for one vector now: reachable, and the dimension right."""
        start = time.perf_counter()
        await self._embed([PROBE_TEXT])
        self.info = LoadInfo(
            backend="endpoint",
            source="endpoint",
            detail=f"{self.where}, {self.dim} dims",
            seconds=time.perf_counter() - start,
            torch_loaded=False,
        )
        return self.info

    async def encode(self, texts: list[str], *, is_query: bool = False) -> np.ndarray:
        """Unit float32 vectors for ``texts``, ``(len(texts), dim)``."""
        texts = with_prefix(texts, self.prefixes[0] if is_query else self.prefixes[1])
        try:
            vecs = await self._embed(texts, is_query=is_query)
        except MemoryStoreError as exc:
            self.failed(exc)
            raise
        if self.info is None:
            self.info = LoadInfo("endpoint", "endpoint", self.where, 0.0, False)
        return vecs

    def start_warming(self) -> None:
        """Probe the endpoint in the background until it answers (once at a time)."""
        if self.error is not None or self.is_ready:
            return
        if self._warming is None or self._warming.done():
            self._warming = asyncio.create_task(self._warm(), name="memory-endpoint-probe")

    async def _warm(self) -> LoadInfo | None:
        pause = PROBE_S
        while True:
            try:
                info = await self.load()
            except EndpointDownError as exc:
                self._down(exc)
                await asyncio.sleep(pause)
                pause = min(pause * 2, PROBE_MAX_S)
                continue
            except MemoryStoreError as exc:
                self._fail(exc)
                return None
            break
        if self.is_down:
            self.is_down = False
            log.info("memory: embedding endpoint %s answers again; vectors resume", self.url)
            log_event("memory_op", op="endpoint_up", url=self.url)
        log_event(
            "memory_op",
            op="embedder_ready",
            backend="endpoint",
            source=self.url,
            detail=self.model,
            duration_ms=round(info.seconds * 1000, 1),
        )
        return info

    async def settle(self) -> None:
        """Nothing to settle: an endpoint is never prepared on disk (see Encoder.settle)."""

    async def prepared_state(self) -> None:
        """None: an endpoint has no prepared model (see Encoder.prepared_state)."""
        return None

    async def wait_ready(self) -> bool:
        """Wait until the endpoint answers (True) or fails for good (False)."""
        self.start_warming()
        if self._warming is not None:
            with contextlib.suppress(MemoryStoreError):
                await asyncio.shield(self._warming)
        return self.is_ready

    def failed(self, exc: MemoryStoreError) -> bool:
        """Note a failure; True when it is temporary (the endpoint is down: probing)."""
        if isinstance(exc, EndpointDownError):
            self._down(exc)
            self.start_warming()
            return True
        self._fail(exc)
        return False

    def _down(self, exc: EndpointDownError) -> None:
        if not self.is_down:
            self.is_down = True
            log.warning("memory: %s — recall is keyword-only (fts) until it answers", exc)
            log_event("memory_op", op="endpoint_down", url=self.url, error=str(exc))

    def _fail(self, exc: MemoryStoreError) -> None:
        if self.error is None:
            self.error = exc
            log.error("memory: %s — recall is FTS-only from now on", exc)
            log_event("memory_op", op="embedder_failed", error=str(exc))

    async def close(self) -> None:
        if self._warming is not None and not self._warming.done():
            self._warming.cancel()
            with contextlib.suppress(asyncio.CancelledError, MemoryStoreError):
                await self._warming
        self._warming = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None
