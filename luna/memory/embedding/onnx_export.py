"""Export a sentence-transformers model to ONNX, check it against torch, cache it on disk.

Run as a child process: ``python -m luna.memory.embedding.onnx_export [--detached] MODEL DIM
CACHE_DIR``. It is the only place besides the torch fallback that imports torch; it exits when
done, and its memory goes with it. The embedding process starts it, detached, when the cache has
no entry for the model (:mod:`luna.memory.embedding.export_job`); ``.ci/install`` and the tests
run it in the foreground (:func:`luna.memory.embedding.model_cache.run_export`).

Invariants:
- Only the plain layout is exported: ``[Transformer, Pooling(mean | cls), (Normalize)]`` with a
  fast tokenizer. Anything else (custom code, other pooling) is recorded as unsupported, with
  the reason, and embeddings stay on torch; the log says so.
- An export is published only after the ONNX vectors, computed exactly as later starts will
  compute them (:class:`OnnxEncoder`), match torch's on ``PROBES`` with cosine > ``MIN_COSINE``.
  An export that fails that check is recorded as unsupported too.
- Exit code 0: published; ``EXIT_UNSUPPORTED``: recorded as unsupported; anything else: nothing
  published (the next start tries again). The last stdout line says what happened.
- It holds the cache folder's export lock for this model while it runs, so two exports of it
  never run at once; one that gets the lock after another published the entry exits 0 at once
  (before importing torch).
- ``--detached``: it outlives whoever started it (a short run that exits mid-export leaves it
  to finish), at nice ``WORKER_NICE``, and SIGALRM ends it after ``EXPORT_TIMEOUT_S``.
  Otherwise it dies with its parent: started by ``run_export``, the kernel kills it the moment
  the parent goes (``PR_SET_PDEATHSIG``); by hand, within half a second.
"""

from __future__ import annotations

import io
import shutil
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from luna.memory.embedding.embed_worker import WORKER_NICE, die_with_parent, exit_with_parent
from luna.memory.embedding.embeddings import ONNX_BATCH_SIZE, quiet_progress_bars
from luna.memory.embedding.export_job import holding_lock
from luna.memory.embedding.model_cache import (
    EXIT_UNSUPPORTED,
    EXPORT_TIMEOUT_S,
    MANIFEST,
    PARENT_ENV,
    STEP_PREFIX,
    UNSUPPORTED,
    cache_key,
    lookup,
    new_tmp_dir,
    publish,
)
from luna.memory.embedding.models import resolve_model
from luna.memory.embedding.onnx_encoder import MODEL_FILE, TOKENIZER_FILE, OnnxEncoder

MIN_COSINE = 0.9999
OPSET = 17
PROBES = [
    "we moved to Lisbon in March",
    "Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
    "x",
    "  Whitespace around, UPPER and lower case, numbers 12,345.67 and émigré ünïcödé 🚲  ",
    "a much longer message that runs past the model's sequence limit " * 30,
]
_POOLING = ("mean", "cls")


class Unsupported(Exception):
    """This model cannot be exported (the reason is the message); embeddings stay on torch."""


def pooling_mode(pooling: Any) -> str:
    config = pooling.get_config_dict() if hasattr(pooling, "get_config_dict") else {}
    mode = config.get("pooling_mode")
    if isinstance(mode, str):
        return mode
    if config.get("pooling_mode_mean_tokens"):
        return "mean"
    if config.get("pooling_mode_cls_token"):
        return "cls"
    return str(mode)


def check_layout(model: Any) -> str:
    """The pooling mode of an exportable model; raises Unsupported otherwise."""
    modules = list(model)
    names = [type(m).__name__ for m in modules]
    if names not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        raise Unsupported(f"model layout {names} is not exported")
    pooling = pooling_mode(modules[1])
    if pooling not in _POOLING:
        raise Unsupported(f"pooling {pooling!r} is not exported")
    if getattr(model.tokenizer, "backend_tokenizer", None) is None:
        raise Unsupported("the model has no fast tokenizer (tokenizer.json)")
    return pooling


def write_export(model: Any, folder: Path) -> dict[str, Any]:
    """Export ``model`` into ``folder``; returns its manifest (not yet written)."""
    import onnx
    import torch

    pooling = check_layout(model)
    transformer_module = list(model)[0]
    transformer = transformer_module.auto_model.eval()
    tokenizer = model.tokenizer
    sample = tokenizer(["hello world"], return_tensors="pt", padding=True)
    input_names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in sample]

    class _Hidden(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *inputs: Any) -> Any:
            return self.inner(**dict(zip(input_names, inputs, strict=True))).last_hidden_state

    buffer = io.BytesIO()
    axes = {n: {0: "batch", 1: "tokens"} for n in input_names}
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's notes are not the user's concern
        torch.onnx.export(
            _Hidden(transformer),
            tuple(sample[n] for n in input_names),
            buffer,  # type: ignore[arg-type]  # the legacy exporter writes to a file object too
            input_names=input_names,
            output_names=["hidden"],
            dynamic_axes={**axes, "hidden": {0: "batch", 1: "tokens"}},
            opset_version=OPSET,
            dynamo=False,
        )
    graph = onnx.load_from_string(buffer.getvalue())
    onnx.save_model(
        graph,
        str(folder / MODEL_FILE),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=MODEL_FILE + ".data",
        size_threshold=1024,
    )
    tokenizer.backend_tokenizer.save(str(folder / TOKENIZER_FILE))
    get_dim = getattr(model, "get_embedding_dimension", None)
    if get_dim is None:  # sentence-transformers < 5
        get_dim = model.get_sentence_embedding_dimension
    return {
        "pooling": pooling,
        "input_names": input_names,
        "max_length": int(model.max_seq_length or tokenizer.model_max_length or 512),
        "do_lower_case": bool(getattr(transformer_module, "do_lower_case", False)),
        "pad_id": int(tokenizer.pad_token_id or 0),
        "pad_type_id": int(getattr(tokenizer, "pad_token_type_id", 0) or 0),
        "native_dim": get_dim(),
        "opset": OPSET,
    }


def check_against_torch(model: Any, folder: Path, manifest: dict[str, Any]) -> float:
    """The smallest cosine between torch's and the exported model's vectors on PROBES."""
    ours = OnnxEncoder.load(folder, manifest).encode(PROBES, ONNX_BATCH_SIZE)
    theirs = model.encode(PROBES, convert_to_numpy=True, normalize_embeddings=False)
    ours = ours / np.linalg.norm(ours, axis=1, keepdims=True)
    theirs = theirs / np.linalg.norm(theirs, axis=1, keepdims=True)
    return float(np.min(np.sum(ours * theirs, axis=1)))


def step(name: str, start: float) -> None:
    """Say on stderr what the export does now and how long it has run (see run_export)."""
    print(
        f"{STEP_PREFIX}{name} ({time.monotonic() - start:.0f} s so far)",
        file=sys.stderr,
        flush=True,
    )


def export(model_name: str, dim: int, cache_dir: Path) -> tuple[int, str]:
    """Export and publish; returns (exit code, what happened)."""
    start = time.monotonic()
    quiet_progress_bars()
    step("1/4 loading torch and the model", start)
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(
        resolve_model(model_name),
        device="cpu",
        trust_remote_code="nomic-embed" in model_name.lower(),
    )
    key = cache_key(model_name, dim)  # after loading: a model just downloaded has its files
    tmp = new_tmp_dir(cache_dir, key)
    try:
        try:
            step("2/4 exporting it to ONNX", start)
            manifest = write_export(model, tmp)
            step("3/4 checking the export against torch", start)
            cosine = check_against_torch(model, tmp, manifest)
            if not cosine > MIN_COSINE:
                raise Unsupported(f"the exported model differs from torch (cosine {cosine:.6f})")
        except (Unsupported, RuntimeError, ValueError, TypeError) as exc:
            for path in tmp.iterdir():
                path.unlink()
            where = publish(tmp, cache_dir, key, UNSUPPORTED, {"reason": str(exc)})
            return EXIT_UNSUPPORTED, f"unsupported: {exc} (recorded in {where})"
        step("4/4 saving it in the model cache", start)
        manifest["min_cosine_to_torch"] = round(cosine, 7)
        manifest["export_seconds"] = round(time.monotonic() - start, 2)
        where = publish(tmp, cache_dir, key, MANIFEST, manifest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return 0, f"exported to {where} in {manifest['export_seconds']} s (cosine {cosine:.7f})"


def _detach() -> None:
    """Run on after whoever started this (a session of its own: see export_job), but not
    forever: SIGALRM ends it after EXPORT_TIMEOUT_S; and below the priority of a turn."""
    import os
    import signal

    signal.alarm(int(EXPORT_TIMEOUT_S))
    try:
        os.setpriority(os.PRIO_PROCESS, 0, max(os.getpriority(os.PRIO_PROCESS, 0), WORKER_NICE))
    except OSError:  # pragma: no cover - not allowed here: run at the priority it has
        pass


def main(argv: list[str] | None = None) -> int:
    import os

    args = sys.argv[1:] if argv is None else argv
    is_detached = args[:1] == ["--detached"]
    args = args[1:] if is_detached else args
    if len(args) != 3:
        print(
            "usage: python -m luna.memory.embedding.onnx_export [--detached] MODEL DIM CACHE_DIR",
            file=sys.stderr,
        )
        return 2
    parent = os.environ.get(PARENT_ENV)
    if is_detached:  # started by export_job.prepare: outlives it, bounded by a timeout
        _detach()
    elif parent:  # started by run_export: go the moment the embedding process does
        die_with_parent(int(parent))
    else:
        threading.Thread(target=exit_with_parent, args=(os.getppid(),), daemon=True).start()
    model_name, dim, cache_dir = args[0], int(args[1]), Path(args[2])
    with holding_lock(cache_dir, model_name, dim):  # one export at a time; then see what is there
        entry = lookup(cache_dir, cache_key(model_name, dim))
        if entry is not None:
            print(f"already prepared by another export: {entry.path}", flush=True)
            return 0 if entry.is_export else EXIT_UNSUPPORTED
        code, detail = export(model_name, dim, cache_dir)
    print(detail, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
