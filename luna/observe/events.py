"""Observability: JSON-lines event log plus readable console logging.

Invariants:
- Every event is one JSON object per line in ``LOG_DIR/luna-YYYY-MM-DD.jsonl``; the file rolls
  over at local midnight while the process runs.
- Events carry a stable snake_case ``event`` name, a UTC timestamp and, when inside a turn, the
  ``turn_id`` and ``session_id`` from context variables (so concurrent sessions don't mix).
- Secret values registered with :func:`setup` are replaced by ``***`` in every line, and message
  text is only logged at DEBUG.
- Writing is a small buffered append under a lock; it never raises into the caller.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import json
import logging
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from luna.messages import neutralize

turn_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("turn_id", default=None)
session_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "session_id", default=None
)

_log = logging.getLogger("luna")


class EventLog:
    """Append-only JSON-lines writer with daily files."""

    def __init__(
        self,
        log_dir: Path,
        secrets: list[str] | None = None,
        today: Callable[[], str] | None = None,
    ) -> None:
        self.log_dir = log_dir
        self._today = today or (lambda: dt.datetime.now().strftime("%Y-%m-%d"))
        self._secrets = _secret_forms(secrets or [])
        self._lock = threading.Lock()
        self._day: str | None = None
        self._file: Any = None

    def path_for(self, day: str) -> Path:
        return self.log_dir / f"luna-{day}.jsonl"

    def _scrub(self, text: str) -> str:
        for s in self._secrets:
            text = text.replace(s, "***")
        return text

    def write(self, record: dict[str, Any]) -> None:
        try:
            line = self._scrub(json.dumps(record, default=str, ensure_ascii=False))
            day = self._today()
            with self._lock:
                if day != self._day:
                    if self._file:
                        self._file.close()
                    self.log_dir.mkdir(parents=True, exist_ok=True)
                    self._file = self.path_for(day).open("a", encoding="utf-8")
                    self._day = day
                self._file.write(line + "\n")
                self._file.flush()
        except Exception:  # logging must never break a turn
            pass

    def close(self) -> None:
        with self._lock:
            if self._file:
                self._file.close()
                self._file = None
                self._day = None


_event_log: EventLog | None = None


def _secret_forms(secrets: list[str]) -> list[str]:
    """Each secret as written and as it appears inside JSON (quotes, backslashes escaped)."""
    forms = {s for s in secrets if s}
    forms |= {json.dumps(s)[1:-1] for s in forms}
    return sorted(forms, key=len, reverse=True)


class _ScrubbingFormatter(logging.Formatter):
    """Scrubs the whole formatted record (message, traceback and stack alike), and shows its
    control characters instead of letting the terminal obey them (``neutralize``)."""

    def __init__(self, fmt: str, secrets: list[str]) -> None:
        super().__init__(fmt)
        self.secrets = _secret_forms(secrets)

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        for s in self.secrets:
            text = text.replace(s, "***")
        return neutralize(text)


TURN_DETAIL = {"is_turn_detail": True}
"""``extra=`` for a warning about a turn that its front-end reports to the user anyway (the
turn's one error line): a console that shows the conversation leaves it out."""


def hide_turn_details(record: logging.LogRecord) -> bool:
    """A console filter: False (drop) for records logged with :data:`TURN_DETAIL`."""
    return not getattr(record, "is_turn_detail", False)


class _ConsoleHandler(logging.StreamHandler):
    """Luna's console handler: the one ``setup`` replaces when called again."""


def setup(
    log_dir: Path | None,
    *,
    level: str = "INFO",
    console: bool = True,
    secrets: list[str] | None = None,
    stream: Any = None,
) -> None:
    """Configure the event log and console logging once per process."""
    global _event_log
    if _event_log is not None:
        _event_log.close()
    _event_log = EventLog(log_dir, secrets) if log_dir is not None else None
    root = logging.getLogger()
    for h in list(root.handlers):
        if isinstance(h, _ConsoleHandler):
            root.removeHandler(h)
    if console:
        handler = _ConsoleHandler(stream or sys.stderr)
        handler.setFormatter(
            _ScrubbingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s", secrets or [])
        )
        root.addHandler(handler)
    root.setLevel(level.upper())
    # Third-party chatter stays at WARNING unless we debug.
    for noisy in (
        "httpx",
        "httpcore",
        "openai",
        "discord",
        "telegram",
        "mcp",
        "sentence_transformers",
    ):
        logging.getLogger(noisy).setLevel(logging.WARNING if level.upper() != "DEBUG" else "DEBUG")


def shutdown() -> None:
    global _event_log
    if _event_log is not None:
        _event_log.close()
        _event_log = None


def log_event(event: str, **fields: Any) -> None:
    """Write one structured event line (and nothing else)."""
    record: dict[str, Any] = {
        "ts": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
        "event": event,
    }
    tid, sid = turn_id_var.get(), session_id_var.get()
    if tid:
        record["turn_id"] = tid
    if sid:
        record["session_id"] = sid
    record.update(fields)
    if _event_log is not None:
        _event_log.write(record)


def is_debug() -> bool:
    return logging.getLogger().isEnabledFor(logging.DEBUG)


def new_turn_id() -> str:
    return uuid.uuid4().hex[:12]


@contextlib.contextmanager
def turn_context(session_id: str, turn_id: str | None = None) -> Iterator[str]:
    """Bind turn and session ids for every event logged inside the block."""
    tid = turn_id or new_turn_id()
    t1 = turn_id_var.set(tid)
    t2 = session_id_var.set(session_id)
    try:
        yield tid
    finally:
        turn_id_var.reset(t1)
        session_id_var.reset(t2)


class Timer:
    """``with Timer() as t: ...; t.ms`` — wall-clock milliseconds."""

    def __enter__(self) -> Timer:
        self._start = time.perf_counter()
        self.ms = 0.0
        return self

    def __exit__(self, *exc: object) -> None:
        self.ms = (time.perf_counter() - self._start) * 1000

    @property
    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self._start) * 1000
