"""The embedding model's export as a job of its own: locked, detached, and waited for.

Why: the export takes tens of seconds (torch, then a check against it), longer than a one-shot
run (``echo … | luna``) lives. Started as a child that dies with Luna, it was killed at every
short run's exit and began again from nothing at the next. Started here, it runs in a session
of its own and finishes after the process that started it has gone; the next start finds the
published entry (:mod:`luna.memory.embedding.model_cache`).

Invariants:
- At most one export per (cache folder, model, dimension) runs at a time: the exporter holds an
  exclusive ``flock`` on ``.export-<model>-<dim>.lock`` in the cache folder for as long as it
  runs (the kernel drops it when the process ends, however it ends). An exporter that gets the
  lock after another one published the entry exits at once without importing torch.
- :func:`prepare` starts an exporter only when none holds the lock; either way it waits for the
  lock to be free and reports what the cache then holds. Its caller may be killed at any point:
  the exporter does not notice.
- A detached exporter bounds itself (``EXPORT_TIMEOUT_S``, then SIGALRM ends it) and runs at
  a lower CPU priority; its output goes to ``.export-<model>-<dim>.log`` beside the lock, whose
  step lines :func:`prepare` relays as :func:`luna.memory.embedding.model_cache.run_export`
  does.
- Blocking (files, a subprocess, sleeps): call from a worker thread or the embedding process.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from luna.memory.embedding.model_cache import (
    EXPORT_TIMEOUT_S,
    ExportOutcome,
    StepRelay,
)

POLL_S = 0.25
EXPORTER = "luna.memory.embedding.onnx_export"


def _stem(model_name: str, dim: int) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model_name).strip("._")[-60:] or "model"
    return f".export-{slug}-{int(dim)}"


def lock_path(cache_dir: Path, model_name: str, dim: int) -> Path:
    return cache_dir / f"{_stem(model_name, dim)}.lock"


def log_path(cache_dir: Path, model_name: str, dim: int) -> Path:
    return cache_dir / f"{_stem(model_name, dim)}.log"


@contextlib.contextmanager
def holding_lock(cache_dir: Path, model_name: str, dim: int) -> Iterator[None]:
    """Hold the export lock (waiting for it while another export runs)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path(cache_dir, model_name, dim), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def is_under_way(cache_dir: Path, model_name: str, dim: int) -> bool:
    """True while an exporter holds the lock (checked without waiting)."""
    try:
        fd = os.open(lock_path(cache_dir, model_name, dim), os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # a lock taken here is released with it
    return False


def start_detached(cache_dir: Path, model_name: str, dim: int) -> subprocess.Popen[bytes]:
    """Start an exporter in a session of its own, its output in the log beside the lock."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", EXPORTER, "--detached", model_name, str(dim), str(cache_dir)]
    with log_path(cache_dir, model_name, dim).open("wb") as log:
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # no terminal signals, and it outlives whoever started it
            close_fds=True,
        )


def _read_log(path: Path, relay: StepRelay) -> None:
    """Hand the log's complete lines not seen yet to ``relay``."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return
    relay.feed(text[: text.rfind("\n") + 1].splitlines())


def prepare(
    cache_dir: Path, model_name: str, dim: int, timeout: float = EXPORT_TIMEOUT_S
) -> ExportOutcome:
    """Make sure an export of the model runs (starting a detached one unless one is under way)
    and wait for it to end; the outcome says what it printed last."""
    start = time.monotonic()
    proc: subprocess.Popen[bytes] | None = None
    if not is_under_way(cache_dir, model_name, dim):
        try:
            proc = start_detached(cache_dir, model_name, dim)
        except OSError as exc:
            return ExportOutcome(False, f"the export did not start: {exc}", 0.0)
    log = log_path(cache_dir, model_name, dim)
    relay = StepRelay()
    while time.monotonic() - start < timeout:
        time.sleep(POLL_S)
        _read_log(log, relay)
        running = proc.poll() is None if proc is not None else False
        if not running and not is_under_way(cache_dir, model_name, dim):
            break
    else:
        return ExportOutcome(False, "the export is still under way", time.monotonic() - start)
    _read_log(log, relay)
    detail = relay.outcome_line() or "no output"
    if proc is not None and proc.returncode:
        detail = f"exit code {proc.returncode}: {detail}"
    is_ok = proc.returncode == 0 if proc is not None else True  # another's: see the cache
    return ExportOutcome(is_ok, detail, time.monotonic() - start)
