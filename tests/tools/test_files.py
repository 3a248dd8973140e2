"""File tools: line windows, binary detection, writes, listings, and path confinement."""

# ruff: noqa: ASYNC240 - tests prepare and inspect small files directly

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from luna.messages import ToolCall
from luna.tools import build_registry
from tests.tools.conftest import DB_CANARY, ENV_CANARY, LOG_CANARY


async def run(reg, ctx, name: str, **args) -> tuple[bool, str]:
    result = await reg.execute(ToolCall("f", name, json.dumps(args)), ctx)
    return result.is_error, result.content


async def test_read_file_line_window(tools_config, make_ctx) -> None:
    cfg = tools_config()
    (cfg.agent.workspace / "notes.txt").write_text("".join(f"line {i}\n" for i in range(1, 501)))
    reg = build_registry(cfg)
    err, out = await run(reg, make_ctx(), "read_file", path="notes.txt", offset=10, limit=3)
    assert not err
    assert "line 10\n" in out.replace("\t", " ") and "line 12" in out and "line 13" not in out
    assert "continue with offset=13" in out
    err, out = await run(reg, make_ctx(), "read_file", path="notes.txt", offset=499)
    assert "line 500" in out and "more lines follow" not in out


async def test_read_file_detects_binary_and_missing(tools_config, make_ctx) -> None:
    cfg = tools_config()
    (cfg.agent.workspace / "blob.bin").write_bytes(b"\x7fELF\0\0\x01" * 100)
    reg = build_registry(cfg)
    err, out = await run(reg, make_ctx(), "read_file", path="blob.bin")
    assert err and "looks binary" in out
    err, out = await run(reg, make_ctx(), "read_file", path="nope.txt")
    assert err and "does not exist" in out


async def test_read_file_output_stays_under_passthrough(tools_config, make_ctx) -> None:
    cfg = tools_config()
    (cfg.agent.workspace / "wide.txt").write_text(("x" * 300 + "\n") * 1000)
    reg = build_registry(cfg)
    err, out = await run(reg, make_ctx(), "read_file", path="wide.txt", limit=1000)
    assert not err and "output limit; read on with offset=" in out
    assert "saved to" not in out and len(out) < cfg.tools.passthrough_bytes + 200


async def test_write_file_creates_parents_and_appends(tools_config, make_ctx) -> None:
    cfg = tools_config()
    reg = build_registry(cfg)
    err, out = await run(reg, make_ctx(), "write_file", path="a/b/c.txt", content="one\n")
    assert not err and "wrote 4 bytes" in out
    err, out = await run(
        reg, make_ctx(), "write_file", path="a/b/c.txt", content="two\n", append=True
    )
    assert not err and (cfg.agent.workspace / "a/b/c.txt").read_text() == "one\ntwo\n"
    err, out = await run(reg, make_ctx(), "write_file", path="a/b/c.txt", content="3")
    assert not err and (cfg.agent.workspace / "a/b/c.txt").read_text() == "3"


async def test_write_file_asks_on_discord(tools_config, make_ctx) -> None:
    reg = build_registry(tools_config())
    err, out = await run(reg, make_ctx(frontend="discord"), "write_file", path="x", content="y")
    assert err and "approval" in out


async def test_list_directory_recursion_and_limits(tools_config, make_ctx) -> None:
    cfg = tools_config()
    ws = cfg.agent.workspace
    for i in range(5):
        (ws / "d1" / "d2" / "d3").mkdir(parents=True, exist_ok=True)
        (ws / "d1" / f"f{i}.txt").write_text("x")
    (ws / "d1" / "d2" / "d3" / "deep.txt").write_text("x")
    reg = build_registry(cfg)
    _, flat = await run(reg, make_ctx(), "list_directory", path=".")
    assert "d1/" in flat and "f0.txt" not in flat
    _, rec = await run(reg, make_ctx(), "list_directory", path=".", recursive=True, max_depth=2)
    assert "f0.txt (1 bytes)" in rec and "d3/" not in rec
    _, deep = await run(reg, make_ctx(), "list_directory", recursive=True, max_depth=5)
    assert "deep.txt" in deep
    _, few = await run(reg, make_ctx(), "list_directory", recursive=True, max_entries=3)
    assert "[stopped at 3 entries]" in few


@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        "../luna.db",
        "../.env",
        "../logs/luna-2026-01-01.jsonl",
        "{db}",
        "{db}-wal",
        "../../outside/secret.txt",
        "~/../luna.db",
    ],
)
async def test_file_tools_refuse_paths_outside_roots(tools_config, make_ctx, path: str) -> None:
    cfg = tools_config()
    outside = cfg.data_dir.parent / "outside"
    outside.mkdir(exist_ok=True)
    (outside / "secret.txt").write_text("outside-secret")
    reg = build_registry(cfg)
    p = path.format(db=cfg.memory.db_path)
    err, out = await run(reg, make_ctx(), "read_file", path=p)
    assert err and "refused" in out
    for canary in (DB_CANARY, ENV_CANARY, LOG_CANARY, "outside-secret", "root:"):
        assert canary not in out
    err, out = await run(reg, make_ctx(), "write_file", path=p, content="pwned")
    assert err and "refused" in out


async def test_file_tools_resolve_symlinks(tools_config, make_ctx) -> None:
    cfg = tools_config()
    ws = cfg.agent.workspace
    os.symlink(cfg.memory.db_path, ws / "db-link")
    os.symlink(cfg.data_dir, ws / "data-link")
    os.symlink("/etc", ws / "etc-link")
    reg = build_registry(cfg)
    for path in ("db-link", "data-link/luna.db", "data-link/.env", "etc-link/hostname"):
        err, out = await run(reg, make_ctx(), "read_file", path=path)
        assert err and "refused" in out and DB_CANARY not in out, path
    err, out = await run(reg, make_ctx(), "write_file", path="etc-link/luna_x", content="x")
    assert err and not Path("/etc/luna_x").exists()
    _, listing = await run(reg, make_ctx(), "list_directory", path="data-link")
    assert "luna.db" not in listing


async def test_read_roots_allow_reading_but_never_the_data_dir(
    tools_config, make_ctx, tmp_path: Path
) -> None:
    extra = tmp_path / "docs"
    extra.mkdir()
    (extra / "readme.md").write_text("extra-root-content")
    cfg = tools_config({"tools": {"read_roots": [str(extra), str(tmp_path)]}})
    reg = build_registry(cfg)
    err, out = await run(reg, make_ctx(), "read_file", path=str(extra / "readme.md"))
    assert not err and "extra-root-content" in out
    err, out = await run(reg, make_ctx(), "write_file", path=str(extra / "x"), content="x")
    assert err and "outside the workspace or write_roots" in out
    err, out = await run(reg, make_ctx(), "read_file", path=str(cfg.memory.db_path))
    assert err and DB_CANARY not in out
    _, listing = await run(reg, make_ctx(), "list_directory", path=str(tmp_path))
    assert "docs/" in listing and "data/" not in listing


async def test_write_roots_allow_writing(tools_config, make_ctx, tmp_path: Path) -> None:
    extra = tmp_path / "projects"
    extra.mkdir()
    cfg = tools_config({"tools": {"write_roots": [str(extra)]}})
    reg = build_registry(cfg)
    err, _ = await run(reg, make_ctx(), "write_file", path=str(extra / "p.txt"), content="ok")
    assert not err and (extra / "p.txt").read_text() == "ok"


async def test_outputs_dir_is_readable_not_writable(tools_config, make_ctx) -> None:
    cfg = tools_config()
    cfg.tools.outputs_dir.mkdir(parents=True, exist_ok=True)
    saved = cfg.tools.outputs_dir / "bash-abc.txt"
    saved.write_text("saved output line\n")
    reg = build_registry(cfg)
    err, out = await run(reg, make_ctx(), "read_file", path=str(saved))
    assert not err and "saved output line" in out
    err, out = await run(reg, make_ctx(), "write_file", path=str(saved), content="x")
    assert err and saved.read_text() == "saved output line\n"


async def test_subagent_workdir_is_the_relative_base(tools_config, make_ctx) -> None:
    cfg = tools_config()
    workdir = cfg.agent.workspace / "code" / "demo"
    reg = build_registry(cfg)
    err, _ = await run(
        reg, make_ctx(workdir=workdir, depth=1), "write_file", path="m.py", content="print(1)"
    )
    assert not err and (workdir / "m.py").read_text() == "print(1)"


async def test_read_file_huge_single_line_is_cut_in_constant_memory(tools_config, make_ctx) -> None:
    import tracemalloc

    cfg = tools_config()
    path = cfg.agent.workspace / "one-line.txt"
    with path.open("wb") as f:
        for _ in range(15):  # under MAX_READ_BYTES, so the next line stays reachable
            f.write(b"y" * 1_000_000)
        f.write(b"\nsecond line\n")
    reg = build_registry(cfg)
    tracemalloc.start()
    try:
        err, out = await run(reg, make_ctx(), "read_file", path="one-line.txt")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not err, out
    assert peak < 5_000_000, f"read_file held {peak / 1e6:.0f} MB for a 15 MB line"
    # The long line is shown cut (not skipped forever), and the next line is still reachable.
    assert "yyyy" in out and "line cut" in out and "second line" in out, out[-500:]
    assert len(out) < cfg.tools.passthrough_bytes + 200


async def test_read_file_reads_documents_as_text(tools_config, make_ctx) -> None:
    from tests.fakes.attachments import docx, pdf, scanned_pdf

    cfg = tools_config()
    ws = cfg.agent.workspace
    (ws / "report.pdf").write_bytes(pdf([f"Quarterly figure {i}" for i in range(1, 31)]))
    (ws / "memo.docx").write_bytes(docx(["Dear team,", "the meeting moves to Friday."]))
    (ws / "scan.pdf").write_bytes(scanned_pdf())
    (ws / "locked.pdf").write_bytes(pdf(["secret"], password="pw"))
    (ws / "archive.zip").write_bytes(b"PK\x03\x04" + b"\0" * 100)
    reg = build_registry(cfg)
    err, out = await run(reg, make_ctx(), "read_file", path="report.pdf", offset=3, limit=4)
    assert not err, out
    assert "report.pdf (PDF, " in out and " bytes; PDF, 30 pages), as text, lines 3-6" in out
    assert "--- page 2 ---" in out and "Quarterly figure 3" in out and "figure 4" not in out
    assert "continue with offset=7" in out
    err, out = await run(reg, make_ctx(), "read_file", path="memo.docx")
    assert not err and "Word document" in out and "the meeting moves to Friday." in out
    err, out = await run(reg, make_ctx(), "read_file", path="scan.pdf")
    assert not err and "no text layer" in out and "): no text to show" in out
    err, out = await run(reg, make_ctx(), "read_file", path="locked.pdf")
    assert not err and "PDF encrypted with a password: not read" in out
    err, out = await run(reg, make_ctx(), "read_file", path="archive.zip")
    assert err and "looks binary" in out
