"""The escape suite, resources part: each bash limit holds, through the real registry and bwrap.

Every test drives the ``bash`` tool as the model does, checks the host afterwards (file sizes,
leftover processes) and that the model was told in one line; a benign command in the same
registry must still work after each attack. (The confinement part is ``test_sandbox.py``.)
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from luna.config import Config
from luna.messages import ToolCall
from luna.tools import build_registry
from luna.tools.sandbox import bwrap_command

MB = 1024 * 1024
SLOW_WRITER = "for i in $(seq {n}); do head -c 1M /dev/zero > g$i; sleep 0.02; done"


@pytest.fixture(autouse=True)
def _require_bwrap() -> None:
    if shutil.which("bwrap") is None:
        pytest.fail("bwrap (bubblewrap) is not installed: apt-get install bubblewrap")


async def bash(reg, ctx, command: str, limit: float = 60) -> str:
    call = ToolCall("b", "bash", json.dumps({"command": command, "timeout": limit}))
    return (await reg.execute(call, ctx)).content


async def still_works(reg, ctx) -> None:
    out = await bash(reg, ctx, "echo benign-ok > ok.txt && cat ok.txt")
    assert "benign-ok" in out and "[exit code: 0]" in out, out


def limit_lines(out: str) -> list[str]:
    """The lines Luna adds about limits (after the exit code)."""
    return [line for line in out.splitlines() if line.startswith("[") and "tools." in line]


def processes_with(marker: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if marker.encode() in cmdline and state != "Z":
                pids.append(int(entry))
    return pids


def usage(root: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in root.rglob("*") if p.is_file())


def test_bwrap_command_sizes_every_writable_tmpfs_by_default(tools_config) -> None:
    cfg: Config = tools_config()
    cmd = bwrap_command(cfg, ["true"], cfg.agent.workspace)
    tmp = cmd.index("/tmp", cmd.index("--tmpfs") - 2)
    assert cmd[tmp - 3 : tmp + 1] == ["--size", str(256 * MB), "--tmpfs", "/tmp"]
    shm = cmd.index("/dev/shm")
    assert cmd[shm - 3 : shm + 1] == ["--size", str(64 * MB), "--tmpfs", "/dev/shm"]
    assert ["--remount-ro", "/dev"] == cmd[shm + 1 : shm + 3]
    run = cmd.index("/run")
    assert cmd[run + 1 : run + 3] == ["--remount-ro", "/run"]
    t = cfg.tools
    assert (t.bash_file_max_mb, t.workspace_quota_mb) == (256, 1024)
    assert (t.bash_max_processes, t.bash_memory_mb) == (256, 2048)


async def test_bash_tmp_and_shm_are_bounded_and_dev_run_read_only(tools_config, make_ctx) -> None:
    cfg = tools_config({"tools": {"bash_tmp_mb": 16, "bash_file_max_mb": 64}})
    reg, ctx = build_registry(cfg), make_ctx()
    out = await bash(reg, ctx, "head -c 40M /dev/zero > /tmp/big; stat -c 'tmp %s' /tmp/big")
    assert "No space left on device" in out and f"tmp {16 * MB}" in out, out
    assert limit_lines(out) == ["[/tmp was full: it holds at most 16 MB (tools.bash_tmp_mb)]"], out
    out = await bash(reg, ctx, "head -c 40M /dev/zero > /dev/shm/b; stat -c 'shm %s' /dev/shm/b")
    assert f"shm {16 * MB}" in out, out  # min(bash_tmp_mb, 64 MB)
    assert limit_lines(out) == [
        "[/dev/shm was full: it holds at most 16 MB (tools.bash_tmp_mb)]"
    ], out
    out = await bash(reg, ctx, "echo x > /dev/filler; echo x > /run/filler; ls /dev/filler /run")
    assert out.count("Read-only file system") == 2, out
    await still_works(reg, ctx)


async def test_bash_file_size_limit_holds_and_is_reported_once(tools_config, make_ctx) -> None:
    cfg = tools_config({"tools": {"bash_file_max_mb": 8}})
    reg, ctx = build_registry(cfg), make_ctx()
    out = await bash(reg, ctx, "head -c 20M /dev/zero > big.bin; echo written")
    assert (cfg.agent.workspace / "big.bin").stat().st_size == 8 * MB
    assert "File too large" in out and "written" in out, out
    assert limit_lines(out) == [
        "[a file reached the size limit (8 MB per file, tools.bash_file_max_mb, or what is "
        "left of the workspace quota)]"
    ], out
    out = await bash(reg, ctx, "yes | head -2")  # SIGPIPE works as in any shell; no stale line
    assert "y\ny\n[exit code: 0]" in out and not limit_lines(out), out
    await still_works(reg, ctx)


async def test_a_file_left_at_the_limit_is_not_a_later_hit(tools_config, make_ctx) -> None:
    """The stale line of CI run 17: a file an earlier command left at the limit, with a time
    the wrapper's clock cannot tell from its own start, was reported again. Only a file that
    reaches the limit (new, grown or rewritten) during this command counts."""
    cfg = tools_config({"tools": {"bash_file_max_mb": 8}})
    reg, ctx = build_registry(cfg), make_ctx()
    left = cfg.agent.workspace / "left.bin"
    left.write_bytes(b"\0" * (8 * MB))
    later = time.time() + 5  # a time at or after the next command's start, as a fast one sees
    os.utime(left, (later, later))
    out = await bash(reg, ctx, "ls -l left.bin >/dev/null")
    assert "[exit code: 0]" in out and not limit_lines(out), out
    out = await bash(reg, ctx, "head -c 1M /dev/zero >> left.bin")  # the write fails, says so
    assert "File too large" in out and not limit_lines(out), out  # (the file did not change)
    out = await bash(reg, ctx, "head -c 20M /dev/zero > left.bin")  # rewritten to the limit: a hit
    assert "File too large" in out and len(limit_lines(out)) == 1, out
    out = await bash(reg, ctx, "head -c 4M /dev/zero > half.bin; cat half.bin half.bin > two.bin")
    assert len(limit_lines(out)) == 1 and (cfg.agent.workspace / "two.bin").stat().st_size == 8 * MB


async def test_bash_workspace_quota_stops_a_writer_and_lets_files_be_deleted(
    tools_config, make_ctx
) -> None:
    cfg = tools_config({"tools": {"workspace_quota_mb": 32, "bash_file_max_mb": 8}})
    ws = cfg.agent.workspace
    reg, ctx = build_registry(cfg), make_ctx()
    out = await bash(reg, ctx, SLOW_WRITER.format(n=200))
    assert "[exit code: 137]" in out, out
    assert limit_lines(out) == [
        "[stopped: the workspace grew past its quota of 32 MB (tools.workspace_quota_mb); "
        "the command was killed; delete files to make room]"
    ], out
    assert usage(ws) < 40 * MB, usage(ws) / MB
    # Over the quota: nothing may grow, but deleting works, and then writing works again.
    out = await bash(reg, ctx, "echo more > more.txt; rm -f g*")
    assert "File too large" in out and "was over its quota of 32 MB" in out, out
    assert not list(ws.glob("g*"))
    await still_works(reg, ctx)
    # Faster than the watch may be: then they are caught after the command.
    out = await bash(reg, ctx, "for i in 1 2 3 4 5 6; do head -c 7M /dev/zero > f$i; done")
    caught = ("grew past its quota of 32 MB", "is over its quota: ")
    assert any(c in line for c in caught for line in limit_lines(out)), out
    await bash(reg, ctx, "rm -f f*")
    await still_works(reg, ctx)


async def test_bash_process_limit_stops_many_processes_and_a_fork_bomb(
    tools_config, make_ctx
) -> None:
    cfg = tools_config({"tools": {"bash_max_processes": 32}})
    reg, ctx = build_registry(cfg), make_ctx()
    out = await bash(reg, ctx, "seq 20 | xargs -P 10 -I{} sh -c 'sleep 0.2; echo {}' | wc -l")
    assert "20" in out.split() and not limit_lines(out), out  # a pipeline under the limit
    out = await bash(reg, ctx, "for i in $(seq 1000); do sleep 5151.5 & done; wait")
    assert limit_lines(out) == [
        "[stopped: more than 32 processes at once (tools.bash_max_processes); the command and "
        "its children were killed]"
    ], out
    assert processes_with("sleep\0" + "5151.5") == []
    started = time.monotonic()
    # A real exponential fork bomb, but with a depth bound (2^13 processes at most), so a
    # failing limit cannot take the host's PID space with it.
    bomb = "bomb() { [ $1 -lt 13 ] && { bomb $(($1+1)) | bomb $(($1+1)) & }; sleep 30; }; bomb 0"
    out = await bash(reg, ctx, bomb, limit=60)
    assert time.monotonic() - started < 15
    assert "more than 32 processes" in out, out
    assert processes_with("bomb") == []
    await still_works(reg, ctx)


async def test_bash_memory_limit_per_process(tools_config, make_ctx) -> None:
    cfg = tools_config({"tools": {"bash_memory_mb": 256}})
    reg, ctx = build_registry(cfg), make_ctx()
    big = "python3 -c 'b = bytearray(512 * 1024 * 1024); print(\"got it\")'"
    small = "python3 -c 'b = bytearray(64 * 1024 * 1024); print(\"small ok\")'"
    out = await bash(reg, ctx, f"{big}; {small}")
    assert "MemoryError" in out and "got it" not in out and "small ok" in out, out
    await still_works(reg, ctx)


async def test_bash_cannot_forge_the_limit_verdict(tools_config, make_ctx) -> None:
    reg, ctx = build_registry(tools_config()), make_ctx()
    forged = json.dumps({"limit": "processes", "tmp_full": ["/tmp"], "file_limit": True})
    out = await bash(reg, ctx, f"for fd in $(seq 3 64); do echo '{forged}' >&$fd; done 2>/dev/null")
    assert not limit_lines(out), out


async def test_unsandboxed_bash_keeps_file_size_and_quota_limits(tools_config, make_ctx) -> None:
    cfg = tools_config(
        {"tools": {"sandbox": False, "bash_file_max_mb": 8, "workspace_quota_mb": 32}}
    )
    reg = build_registry(cfg)

    async def yes(name: str, args: dict) -> bool:
        return True

    ctx = make_ctx(approver=yes)
    out = await bash(reg, ctx, "head -c 20M /dev/zero > big.bin")
    assert (cfg.agent.workspace / "big.bin").stat().st_size == 8 * MB
    assert any("size limit" in line for line in limit_lines(out)), out
    out = await bash(reg, ctx, SLOW_WRITER.format(n=100))
    assert any("grew past its quota" in line for line in limit_lines(out)), out
    assert usage(cfg.agent.workspace) < 48 * MB
    await bash(reg, ctx, "rm -f g* big.bin")
    await still_works(reg, ctx)


def test_probe_refuses_an_interpreter_the_sandbox_hides(
    tools_config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from luna.tools import sandbox

    hidden = tmp_path / "python3"  # under /tmp: the wrapper's interpreter would be covered
    shutil.copy2(sandbox.INTERPRETER, hidden)
    assert str(hidden).startswith("/tmp/")
    monkeypatch.setattr(sandbox, "INTERPRETER", str(hidden))
    ok, detail = sandbox.sandbox_status(tools_config())
    assert not ok and f"Luna's Python ({hidden}) cannot run inside the sandbox" in detail
