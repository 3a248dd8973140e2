"""What a doctor check returns, and the helpers every check uses.

Invariant: ``ok=None`` means skipped; a failed non-essential check is a warning (⚠) and never
fails the run.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Blocking checks run one at a time: importing torch/numpy from two threads at once can fail
# with a "partially initialized module" ImportError.
_thread_lock: asyncio.Lock | None = None


async def in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """``asyncio.to_thread`` serialized across the doctor's checks."""
    global _thread_lock
    if _thread_lock is None:
        _thread_lock = asyncio.Lock()
    async with _thread_lock:
        return await asyncio.to_thread(fn, *args)


@dataclass
class CheckResult:
    """The outcome of one check; ``ok=None`` means skipped."""

    name: str
    ok: bool | None
    detail: str
    fix: str = ""
    essential: bool = True

    @property
    def failed(self) -> bool:
        return self.ok is False and self.essential

    @property
    def mark(self) -> str:
        if self.ok is None:
            return "–"
        if self.ok:
            return "✓"
        return "✗" if self.essential else "⚠"


def ok(name: str, detail: str) -> CheckResult:
    return CheckResult(name, True, detail)


def fail(name: str, detail: str, fix: str, *, essential: bool = True) -> CheckResult:
    return CheckResult(name, False, detail, fix, essential)


def skipped(name: str, why: str) -> CheckResult:
    return CheckResult(name, None, f"skipped ({why})", essential=False)


def format_result(r: CheckResult, *, ascii_only: bool = False) -> str:
    mark = r.mark
    if ascii_only:
        mark = {"✓": "OK", "✗": "FAIL", "⚠": "WARN", "–": "-"}[mark]
    line = f"{mark} {r.name}: {r.detail}"
    if r.ok is False and r.fix:
        line += f"\n    fix: {r.fix}"
    return line


def can_print_unicode() -> bool:
    try:
        "✓✗⚠–".encode(sys.stdout.encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        return False
    return True
