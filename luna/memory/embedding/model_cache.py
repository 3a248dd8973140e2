"""The on-disk cache of exported embedding models: key, lookup, atomic publish, the exporter.

Why: exporting a sentence-transformers model to ONNX needs torch, and importing torch takes
seconds and hundreds of MB. Done once and kept under the data folder (``<data>/models/``),
later starts load the ONNX file with onnxruntime and ``tokenizers`` alone.

Invariants:
- An entry is a folder named ``<model>-<dim>-<hash of its key>``. The key holds everything that
  can change the vectors: the model name and a fingerprint of its files, the dimension, this
  cache's format and the versions of torch, transformers, sentence-transformers, onnx,
  onnxruntime and tokenizers. A different key is a different folder; an entry is never edited.
- An entry is published atomically: written and fsynced in a ``.tmp-*`` folder beside it, then
  renamed into place. A visible entry is complete; a crash leaves only a ``.tmp-*`` folder, which
  a later export removes once it is an hour old.
- An entry holds either a checked export (``manifest.json`` + ``model.onnx`` +
  ``model.onnx.data`` + ``tokenizer.json``) or ``unsupported.json`` with the reason the model
  cannot be exported (then embeddings stay on torch, and the log says so).
- Nothing here imports torch: the export runs in a child process
  (``python -m luna.memory.embedding.onnx_export``) that exits when it is done, so its memory goes
  too.
- Blocking (files, a subprocess): call from a worker thread or the embedding process.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from luna.memory.embedding.models import resolve_model

log = logging.getLogger(__name__)

CACHE_FORMAT = 1  # bump when the export, its check or the files it writes change
VERSIONED = ("torch", "transformers", "sentence-transformers", "onnx", "onnxruntime", "tokenizers")
MANIFEST = "manifest.json"
UNSUPPORTED = "unsupported.json"
EXPORT_TIMEOUT_S = 900.0
STALE_TMP_S = 3600.0
EXIT_UNSUPPORTED = 3  # the exporter's exit code for "this model cannot be exported"
PARENT_ENV = "LUNA_EXPORT_PARENT"  # the pid the exporter dies with (see onnx_export.main)
STEP_PREFIX = "luna-export-step: "  # a stderr line of the exporter's that says what it does now
# Set by a process whose terminal belongs to an interactive REPL: the export then runs behind a
# prompt the owner may be typing at, and its steps go to the log only (a line written from the
# embedding process would land inside the line being typed).
QUIET_STEPS_ENV = "LUNA_EXPORT_STEPS_QUIET"


def cache_dir_for(db_path: Path) -> Path:
    """The model cache of the data folder that holds ``db_path``."""
    return Path(db_path).parent / "models"


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def model_dir(model_name: str) -> Path | None:
    """The local folder of a model's files, if it can be found without loading anything."""
    resolved = Path(resolve_model(model_name)).expanduser()
    if resolved.is_dir():
        return resolved
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - comes with sentence-transformers
        return None
    found = try_to_load_from_cache(model_name, "config.json")
    return Path(found).parent if isinstance(found, str) else None


def fingerprint(folder: Path | None) -> str | None:
    """A digest of every file's relative path, size and modification time (None: no folder)."""
    if folder is None:
        return None
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        st = path.stat()
        digest.update(f"{path.relative_to(folder)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:32]


def cache_key(model_name: str, dim: int) -> dict[str, Any]:
    """What an export depends on (see the module docstring); equal keys, equal vectors."""
    return {
        "format": CACHE_FORMAT,
        "model": model_name,
        "model_files": fingerprint(model_dir(model_name)),
        "dim": int(dim),
        "versions": {name: _version(name) for name in VERSIONED},
    }


def entry_name(key: dict[str, Any]) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", str(key["model"])).strip("._")[-60:] or "model"
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return f"{slug}-{key['dim']}-{digest}"


@dataclass(frozen=True)
class CacheEntry:
    """One published entry: an export (``manifest``) or a refusal (``reason``)."""

    path: Path
    manifest: dict[str, Any] | None
    reason: str = ""

    @property
    def is_export(self) -> bool:
        return self.manifest is not None


def lookup(cache_dir: Path, key: dict[str, Any]) -> CacheEntry | None:
    """The published entry for ``key``, or None when there is none (or it is not ours)."""
    path = cache_dir / entry_name(key)
    for name in (MANIFEST, UNSUPPORTED):
        try:
            data = json.loads((path / name).read_text())
        except (OSError, ValueError):
            continue
        if data.get("key") != key:
            log.warning("memory: model cache entry %s has another key; ignoring it", path)
            return None
        if name == MANIFEST:
            return CacheEntry(path, data)
        return CacheEntry(path, None, str(data.get("reason") or "cannot be exported"))
    return None


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def new_tmp_dir(cache_dir: Path, key: dict[str, Any]) -> Path:
    """A fresh private folder to write an entry into (stale ones are removed first)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    now = time.time()
    for old in cache_dir.glob(".tmp-*"):
        try:
            if now - old.stat().st_mtime > STALE_TMP_S:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            continue
    tmp = cache_dir / f".tmp-{entry_name(key)}-{os.getpid()}-{os.urandom(4).hex()}"
    tmp.mkdir()
    return tmp


def publish(tmp: Path, cache_dir: Path, key: dict[str, Any], record: str, data: dict) -> Path:
    """Write ``record`` (manifest or refusal) into ``tmp``, fsync it all, rename into place.

    When another process published the same key first, its entry is kept and ``tmp`` removed.
    """
    (tmp / record).write_text(json.dumps({**data, "key": key}, indent=2, sort_keys=True))
    for path in tmp.iterdir():
        _fsync(path)
    _fsync(tmp)
    final = cache_dir / entry_name(key)
    try:
        os.rename(tmp, final)
    except OSError:  # already there (a concurrent export won): same key, same content
        shutil.rmtree(tmp, ignore_errors=True)
    _fsync(cache_dir)
    return final


class StepRelay:
    """Reads the exporter's output lines: its steps go to a person watching (a terminal on this
    process's stderr: the first start takes a minute or more, and should say why), in the log
    either way; anything else is kept for the outcome's detail."""

    def __init__(self) -> None:
        self.is_watched = sys.stderr.isatty() and not os.environ.get(QUIET_STEPS_ENV)
        self.others: list[str] = []
        self._seen = 0

    def add(self, line: str) -> None:
        line = line.rstrip("\n")
        if line.startswith(STEP_PREFIX):
            step = line.removeprefix(STEP_PREFIX)
            log.info("memory: embedding model export: %s", step)
            if self.is_watched:
                print(f"memory: preparing the embedding model, once: {step}", file=sys.stderr)
        elif line.strip():
            self.others.append(line.strip())

    def feed(self, lines: list[str]) -> None:
        """Every line of a growing log so far: those not seen yet are added."""
        for line in lines[self._seen :]:
            self.add(line)
        self._seen = max(self._seen, len(lines))

    def outcome_line(self) -> str:
        return self.others[-1] if self.others else ""


def _relay_steps(stream: Any, relay: StepRelay) -> None:
    for line in stream:
        relay.add(line)


@dataclass(frozen=True)
class ExportOutcome:
    ok: bool
    detail: str
    seconds: float


def run_export(cache_dir: Path, model_name: str, dim: int) -> ExportOutcome:
    """Export the model into the cache in a child process (torch lives and dies there)."""
    start = time.monotonic()
    cmd = [
        sys.executable,
        "-m",
        "luna.memory.embedding.onnx_export",
        model_name,
        str(dim),
        str(cache_dir),
    ]
    env = {**os.environ, PARENT_ENV: str(os.getpid())}
    relay = StepRelay()
    try:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
    except OSError as exc:
        return ExportOutcome(False, f"the export did not start: {exc}", time.monotonic() - start)
    out: list[str] = []
    readers = [
        threading.Thread(target=_relay_steps, args=(proc.stderr, relay), daemon=True),
        threading.Thread(target=lambda: out.extend(proc.stdout or ()), daemon=True),
    ]
    for reader in readers:
        reader.start()
    try:
        proc.wait(timeout=EXPORT_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        proc.kill()
        proc.wait()
        return ExportOutcome(False, f"the export did not finish: {exc}", time.monotonic() - start)
    for reader in readers:
        reader.join(5.0)
    seconds = time.monotonic() - start
    lines = [line.strip() for line in out if line.strip()]
    detail = lines[-1] if lines else (relay.outcome_line() or "no output")
    if proc.returncode not in (0, EXIT_UNSUPPORTED):
        detail = f"exit code {proc.returncode}: {detail}"
    return ExportOutcome(proc.returncode == 0, detail, seconds)
