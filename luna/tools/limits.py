"""The resources one bash command may use, and what it is told when it hits a limit.

The limits (``[tools]`` in config.toml, defaults below) and who enforces each:

- ``/tmp`` is a tmpfs of ``bash_tmp_mb`` and ``/dev/shm`` one of at most ``SHM_MAX_MB``
  (bwrap ``--size``); ``/dev`` and ``/run`` are read-only, so no other RAM-backed folder can
  be filled.
- No file may grow past ``bash_file_max_mb``, nor past what is left of the workspace quota
  (``RLIMIT_FSIZE``, set by :mod:`luna.tools.limit_exec`; the write fails with EFBIG).
- The workspace may hold ``workspace_quota_mb``: checked before each command (what is left
  caps the file size), watched while it runs (the command is stopped once past it) and
  checked after it. ``tools.write_roots`` are not counted.
- At most ``bash_max_processes`` processes at once, counted in bwrap's PID namespace (not
  ``RLIMIT_NPROC``: that counts every process of the user, Luna's own threads included, and
  does not hold for root). Counted 50 times a second: a fork bomb is stopped within a tick.
  Unconfined (no sandbox) there is no namespace to count and no process limit.
- ``bash_memory_mb`` of address space per process (``RLIMIT_AS``); a cgroup could bound the
  whole command, but Luna cannot count on being given one.

Invariants:
- ``wrap`` is the only way a bash command gets its limits. The wrapper is stdlib-only Python,
  passed as ``-c`` source to Luna's own base interpreter with ``-I -S``: it needs no file of
  Luna's inside the sandbox, only the interpreter (the sandbox probe checks that it is
  visible there: an interpreter under /tmp or /run would not be, and bash then asks).
- ``limit_lines`` turns what happened into one line per limit hit, for the model.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from luna.config import Config
from luna.tools import limit_exec

MB = 1024 * 1024
SHM_MAX_MB = 64
WRAPPER_SOURCE = Path(limit_exec.__file__).read_text(encoding="utf-8")
INTERPRETER = os.path.realpath(sys.executable)  # a venv's python is a link to the base one


@dataclass(frozen=True)
class Limits:
    """One command's limits, in bytes and processes."""

    tmp_bytes: int
    shm_bytes: int
    file_bytes: int
    quota_bytes: int
    processes: int
    memory_bytes: int

    @classmethod
    def from_config(cls, cfg: Config) -> Limits:
        t = cfg.tools
        tmp = t.bash_tmp_mb * MB
        return cls(
            tmp_bytes=tmp,
            shm_bytes=min(tmp, SHM_MAX_MB * MB),
            file_bytes=t.bash_file_max_mb * MB,
            quota_bytes=t.workspace_quota_mb * MB,
            processes=t.bash_max_processes,
            memory_bytes=t.bash_memory_mb * MB,
        )


def wrap(
    limits: Limits,
    argv: list[str],
    *,
    workspace: Path,
    used_bytes: int,
    report_fd: int,
    sandboxed: bool,
) -> list[str]:
    """``argv`` run under the wrapper; ``used_bytes`` is the workspace's use right now."""
    left = max(limits.quota_bytes - used_bytes, 0)
    cmd = [
        INTERPRETER,
        "-I",
        "-S",
        "-c",
        WRAPPER_SOURCE,
        "--fsize",
        str(min(limits.file_bytes, left)),
        "--as",
        str(limits.memory_bytes),
        "--watch",
        str(workspace),
        "--quota",  # already over: the command may delete, not grow the workspace further
        str(max(limits.quota_bytes, used_bytes)),
        "--report",
        str(report_fd),
    ]
    if sandboxed:
        cmd += ["--pids", str(limits.processes), "--tmp", "/tmp", "--tmp", "/dev/shm"]
    return [*cmd, "--", *argv]


def read_verdict(data: bytes) -> dict[str, object]:
    """The wrapper's verdict; ``{}`` when it wrote none (it was killed: a timeout)."""
    try:
        verdict = json.loads(data.decode("utf-8", "replace")) if data else {}
    except ValueError:
        return {}
    return verdict if isinstance(verdict, dict) else {}


def limit_lines(
    cfg: Config, verdict: dict[str, object], used_before: int, used_after: int
) -> list[str]:
    """One line for the model per limit the command hit (empty when it hit none)."""
    t = cfg.tools
    quota_mb = t.workspace_quota_mb
    lines = []
    if used_before >= quota_mb * MB:
        lines.append(
            f"[the workspace was over its quota of {quota_mb} MB when this command started "
            "(tools.workspace_quota_mb): no file could grow; delete files to make room]"
        )
    if verdict.get("limit") == "processes":
        lines.append(
            f"[stopped: more than {t.bash_max_processes} processes at once "
            "(tools.bash_max_processes); the command and its children were killed]"
        )
    if verdict.get("limit") == "quota":
        lines.append(
            f"[stopped: the workspace grew past its quota of {quota_mb} MB "
            "(tools.workspace_quota_mb); the command was killed; delete files to make room]"
        )
    elif used_after > quota_mb * MB > used_before:
        lines.append(
            f"[the workspace is over its quota: {used_after / MB:.0f} MB used of {quota_mb} MB "
            "(tools.workspace_quota_mb); no file can grow until files are deleted]"
        )
    if verdict.get("file_limit"):
        lines.append(
            f"[a file reached the size limit ({t.bash_file_max_mb} MB per file, "
            "tools.bash_file_max_mb, or what is left of the workspace quota)]"
        )
    full = verdict.get("tmp_full")
    for path in full if isinstance(full, list) else []:
        size = t.bash_tmp_mb if path == "/tmp" else min(t.bash_tmp_mb, SHM_MAX_MB)
        lines.append(f"[{path} was full: it holds at most {size} MB (tools.bash_tmp_mb)]")
    return lines
