"""The exec wrapper that puts a bash command under its resource limits (stdlib only).

Run as ``python -I -S limit_exec.py [options] -- /bin/bash -c CMD``, inside bubblewrap (or
unconfined when the sandbox is off). It forks once: the child sets the rlimits and execs the
command; the parent stays as a small supervisor. Rlimits are set here, in a single-threaded
process between fork and exec, never with ``preexec_fn`` in multi-threaded Luna.

Invariants:
- The child gets ``RLIMIT_FSIZE`` (``--fsize``: no file may grow past it), ``RLIMIT_AS``
  (``--as``: address space per process) and no core files; every process it starts inherits
  them. SIGXFSZ stays ignored (as Python leaves it), so a write past the limit fails with
  EFBIG ("File too large") instead of killing the writer; SIGPIPE is back to its default, as
  in any shell. The report pipe is closed in the child: the command cannot forge a verdict.
- ``--pids N`` (only inside bwrap's PID namespace, where ``/proc`` lists just the sandbox)
  counts the command's processes every ``TICK`` seconds (``FAST_TICK`` past half of ``N``);
  past ``N`` the supervisor reports and exits, and since it is bwrap's first child the kernel
  then kills everything left in the namespace. The command runs at ``NICE`` so that even a
  fork bomb cannot starve its supervisor (measured: a bomb under ``N = 32`` is stopped below
  about 130 processes, within 0.1 s). When bwrap made a user namespace of its own (Luna not
  root), ``RLIMIT_NPROC`` counts only the sandbox's processes and is set too: a hard limit.
  As root it would not hold (root is exempt), and without a user namespace it would count
  every process of the user, so it is not set. Unconfined, there is no namespace to count:
  ``--pids`` is not given.
- ``--watch DIR --quota BYTES`` adds up the disk use of ``DIR`` (adaptively, at most about 5%
  of one core) and stops the command once it passes ``BYTES``.
- ``--tmp DIR`` (repeatable) notes whether that tmpfs was ever full.
- The verdict is one JSON object written to ``--report FD`` at the end:
  ``{"limit": "processes" | "quota" | null, "tmp_full": [the --tmp folders found full],
  "used": bytes of DIR at the
  end, "file_limit": whether a file under DIR or a ``--tmp`` folder is at ``--fsize`` and
  new or changed since the command started}``.
  The exit code is the command's (128 + signal when it was killed, as a shell reports it).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import sys
import time

TICK = 0.02  # seconds between process counts
FAST_TICK = 0.002  # ... once the command has more than half of its processes
NICE = 10  # the command's niceness above its supervisor's
QUOTA_EVERY = 0.1  # seconds between workspace scans at least
QUOTA_SHARE = 20  # ... and at least this many times the last scan's duration
SUPERVISORS = 2  # bwrap's init (pid 1) and this wrapper (pid 2), not the command's


def disk_usage(root: str) -> int:
    """Bytes of disk the files under ``root`` take (hard links once, symlinks not followed)."""
    return scan(root)[0]


def scan(root: str, at_least: int = 0) -> tuple[int, dict[str, tuple[int, int]]]:
    """(bytes of disk the files under ``root`` take, ``{path: (size, mtime_ns)}`` of the files
    of at least ``at_least`` bytes; none when ``at_least`` is 0)."""
    total, large, seen, stack = 0, {}, set(), [root]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                if st.st_nlink > 1 and not entry.is_dir(follow_symlinks=False):
                    if (st.st_dev, st.st_ino) in seen:
                        continue
                    seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
                if 0 < at_least <= st.st_size:
                    large[entry.path] = (st.st_size, st.st_mtime_ns)
    return total, large


def reached_limit(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> bool:
    """Whether a file at the size limit is new or changed since ``before``: a file left at the
    limit by an earlier command is not this command's hit (file times are too coarse to tell
    the two apart by time)."""
    return any(before.get(path) != stamp for path, stamp in after.items())


def process_count() -> int:
    """The command's processes: this PID namespace's, less bwrap's init and this wrapper."""
    return sum(1 for name in os.listdir("/proc") if name.isdigit()) - SUPERVISORS


def has_own_user_namespace() -> bool:
    """True inside a user namespace other than the initial one (its uid_map is not 0 0 2^32-1)."""
    try:
        with open("/proc/self/uid_map") as f:
            fields = f.read().split()
    except OSError:
        return False
    return fields != ["0", "0", "4294967295"]


def is_full(path: str) -> bool:
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    return st.f_bavail == 0


def _exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def _parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    if "--" not in argv:
        raise SystemExit("limit_exec: usage: [options] -- command ...")
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="limit_exec")
    parser.add_argument("--fsize", type=int, required=True)
    parser.add_argument("--as", dest="address_space", type=int, required=True)
    parser.add_argument("--pids", type=int)
    parser.add_argument("--watch")
    parser.add_argument("--quota", type=int)
    parser.add_argument("--tmp", action="append", default=[])
    parser.add_argument("--report", type=int)
    return parser.parse_args(argv[:split]), argv[split + 1 :]


def _start(opts: argparse.Namespace, command: list[str]) -> int:
    pid = os.fork()
    if pid:
        return pid
    try:  # the child: limits, then the command
        if opts.report is not None:
            os.close(opts.report)
        resource.setrlimit(resource.RLIMIT_FSIZE, (opts.fsize, opts.fsize))
        resource.setrlimit(resource.RLIMIT_AS, (opts.address_space, opts.address_space))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if opts.pids is not None and has_own_user_namespace():
            n = opts.pids + SUPERVISORS + 1  # one past the limit, so the count sees it
            resource.setrlimit(resource.RLIMIT_NPROC, (n, n))
        os.nice(NICE)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        os.execv(command[0], command)
    except OSError as e:
        os.write(2, f"limit_exec: cannot run {command[0]}: {e.strerror}\n".encode())
    os._exit(127)


def _report(opts: argparse.Namespace, limit: str | None, full: set[str], **end: object) -> None:
    if opts.report is None:
        return
    data = json.dumps({"limit": limit, "tmp_full": sorted(full), **end}).encode()
    try:
        os.write(opts.report, data)
        os.close(opts.report)
    except OSError:
        pass


def _stop(opts: argparse.Namespace, limit: str, full: set[str]) -> None:
    """Report, then end the command and everything it started."""
    _report(opts, limit, full)
    if opts.pids is not None:  # bwrap's init exits with us and the kernel kills the namespace
        os._exit(128 + signal.SIGKILL)
    os.killpg(os.getpgrp(), signal.SIGKILL)  # unconfined: our own group, started for us


def main(argv: list[str]) -> int:
    opts, command = _parse(argv)
    roots = ([opts.watch] if opts.watch is not None else []) + opts.tmp
    began = time.monotonic()
    at_limit = {root: scan(root, opts.fsize)[1] for root in roots} if opts.fsize > 0 else {}
    # That scan was the quota watch's first (the command cannot be over --quota yet).
    scan_every = max(QUOTA_EVERY, QUOTA_SHARE * (time.monotonic() - began))
    next_scan = time.monotonic() + scan_every
    pid = _start(opts, command)
    full: set[str] = set()
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        tick = TICK
        if opts.pids is not None:
            count = process_count()
            if count > opts.pids:
                _stop(opts, "processes", full)
            if count > opts.pids // 2:
                tick = FAST_TICK
        full.update(t for t in opts.tmp if is_full(t))
        now = time.monotonic()
        if opts.watch is not None and opts.quota is not None and now >= next_scan:
            used = disk_usage(opts.watch)
            spent = time.monotonic() - now
            scan_every = max(QUOTA_EVERY, QUOTA_SHARE * spent)
            next_scan = time.monotonic() + scan_every
            if used > opts.quota:
                _stop(opts, "quota", full)
        time.sleep(tick)
    full.update(t for t in opts.tmp if is_full(t))
    end = {root: scan(root, opts.fsize) for root in roots}
    used = end[opts.watch][0] if opts.watch is not None else 0
    file_limit = any(reached_limit(at_limit[root], end[root][1]) for root in at_limit)
    _report(opts, None, full, used=used, file_limit=file_limit)
    return _exit_code(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
