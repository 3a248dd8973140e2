"""``luna doctor``'s checks of where embeddings come from: the prepared (ONNX-exported) model,
where it lives and whether it is ready; and the embedding endpoint: does
``memory.embedding_endpoint`` answer, with which model and how many dimensions, and what to do
when it does not.

The prepared-model check only looks (:func:`luna.memory.embedding.prepared.find_state`): it
never exports. Not prepared is ⚠ (recall is keyword-only until it is; Luna prepares it).

Invariants: one request through the same client Luna uses
(:class:`luna.memory.embedding.endpoint.EndpointEncoder`, no retries, a short timeout), so the
answer is what the running Luna would get. Down is ⚠ (Luna runs keyword-only meanwhile and
embeds the rest when it is back); a wrong dimension or a refused request is ✗ (vectors stay
off until the configuration changes). The key is never printed.
"""

from __future__ import annotations

import time

from luna.config import Config
from luna.doctor.result import CheckResult, fail, ok, skipped
from luna.errors import MemoryStoreError

PROBE_TIMEOUT_S = 10.0
START_HINT = (
    "start the embedding server (llama.cpp: llama-server --embedding --pooling mean -m "
    "MODEL.gguf --port PORT) or correct memory.embedding_endpoint; until it answers, recall "
    "is keyword-only and new messages are embedded when it is back"
)


PREPARE_HINT = (
    "Luna prepares it in the background at its next start (about a minute, once per machine); "
    "to do it now: luna memory prepare"
)


def prepared_model_result(cfg: Config) -> CheckResult:
    """One line: where the prepared embedding model lives and whether it is ready."""
    from luna.memory.embedding.prepared import find_state, uses_local_model

    m = cfg.memory
    name = "prepared embedding model"
    if not uses_local_model(m):
        why = "memory.embedding_endpoint is set" if m.embedding_endpoint else "backend is torch"
        return skipped(name, f"nothing to prepare: {why}")
    state = find_state(m)
    if state.path is not None:
        kind = "the machine's cache" if state.is_shared else "this data folder's own copy"
        if state.unsupported:
            return ok(name, f"cannot be exported ({state.unsupported}), recorded in {state.path}")
        return ok(name, f"ready in {state.path} ({kind})")
    if state.is_under_way:
        where = state.places.export_dir
        detail = f"being prepared now in {where}; recall is keyword-only until it is ready"
        return fail(name, detail, "wait a minute; nothing to do", essential=False)
    detail = f"not prepared: {state.places.export_dir} has none for {m.embedding_model}"
    return fail(name, detail, PREPARE_HINT, essential=False)


async def check_embedding_endpoint(cfg: Config) -> list[CheckResult]:
    m = cfg.memory
    if not m.embedding_endpoint:
        return [skipped("embedding endpoint", "in-process model: memory.embedding_endpoint empty")]
    from luna.memory.embedding.endpoint import (
        EndpointDimError,
        EndpointDownError,
        EndpointEncoder,
    )

    probe_cfg = m.model_copy(
        update={
            "embedding_retries": 0,
            "embedding_timeout": min(m.embedding_timeout, PROBE_TIMEOUT_S),
        }
    )
    results: list[CheckResult] = []
    if m.embedding_endpoint_key_env and not m.embedding_endpoint_key:
        results.append(
            fail(
                "embedding endpoint key",
                f"memory.embedding_endpoint_key_env names {m.embedding_endpoint_key_env}, "
                "which is not set",
                f"set {m.embedding_endpoint_key_env} in the environment (systemd: in the "
                "EnvironmentFile), or empty memory.embedding_endpoint_key_env",
                essential=False,
            )
        )

    def said(exc: Exception) -> str:  # the check's name already says "embedding endpoint"
        return str(exc).removeprefix("embedding endpoint ")

    enc = EndpointEncoder(probe_cfg)
    start = time.perf_counter()
    try:
        await enc.load()
    except EndpointDownError as exc:
        return [*results, fail("embedding endpoint", said(exc), START_HINT, essential=False)]
    except EndpointDimError as exc:
        fix = "set memory.embedding_dim to what the model returns, then `luna memory reindex`"
        return [*results, fail("embedding endpoint", said(exc), fix)]
    except MemoryStoreError as exc:
        fix = "check memory.embedding_endpoint_model and the endpoint's key"
        return [*results, fail("embedding endpoint", said(exc), fix)]
    finally:
        await enc.close()
    ms = (time.perf_counter() - start) * 1000
    detail = f"{enc.url} answers: model {enc.model!r}, {enc.dim} dims ({ms:.0f} ms)"
    return [*results, ok("embedding endpoint", detail)]
