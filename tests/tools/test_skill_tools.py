"""``load_skill`` and ``save_skill`` through the real registry, files and bubblewrap.

The config is the default layout (data folder holding the workspace and the installed
skills), so a skill's folder is inside the data folder that the sandbox hides: it must be
shown again read-only, at the path load_skill names, and nothing else of the folder may be.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from luna.config import Config
from luna.messages import ToolCall, ToolResult
from luna.skills import store
from luna.tools import ToolContext, build_registry
from tests.tools.conftest import DB_CANARY

BODY = "# Greeter\n\nRun scripts/hello.sh, then read references/notes.md.\n"


def make_skill(root: Path, name: str, *, allowed: str = "", **files: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    extra = f"allowed-tools: {allowed}\n" if allowed else ""
    (folder / "SKILL.md").write_text(
        f"---\nname: {name}\ndescription: Greets. Use when saying hello.\n{extra}---\n{BODY}"
    )
    for rel, text in {"scripts/hello.sh": "#!/bin/sh\necho hello from $(pwd)\n", **files}.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return folder


async def call(reg: Any, ctx: ToolContext, tool: str, **args: Any) -> ToolResult:
    return await reg.execute(ToolCall(id="c", name=tool, arguments=json.dumps(args)), ctx)


def installed(tools_config: Any, tmp_path: Path, **kw: Any) -> tuple[Config, Any]:
    cfg = tools_config()
    store.add(cfg, make_skill(tmp_path / "src", "greeter", **kw))
    return cfg, build_registry(cfg, probe=True)


async def test_load_skill_gives_the_body_trusted_and_its_files(
    tools_config: Any, make_ctx: Any, tmp_path: Path
) -> None:
    cfg, reg = installed(tools_config, tmp_path, **{"references/notes.md": "Be kind."})
    ctx = make_ctx()
    result = await call(reg, ctx, "load_skill", name="greeter")
    folder = cfg.data_dir / "skills" / "greeter"
    assert not result.is_error and BODY.strip() in result.content
    assert "<untrusted" not in result.content  # the owner's own instructions
    assert str(folder) in result.content and "scripts/hello.sh" in result.content
    notes = await call(reg, ctx, "load_skill", name="greeter", path="references/notes.md")
    assert "Be kind." in notes.content and "<untrusted" in notes.content  # a file is data
    read = await call(reg, ctx, "read_file", path=str(folder / "references" / "notes.md"))
    assert "Be kind." in read.content and not read.is_error
    write = await call(reg, ctx, "write_file", path=str(folder / "SKILL.md"), content="x")
    assert write.is_error and "outside" in write.content  # readable, never writable


async def test_load_skill_refuses_paths_out_of_the_skill(
    tools_config: Any, make_ctx: Any, tmp_path: Path
) -> None:
    cfg, reg = installed(tools_config, tmp_path, **{"assets/logo.png": "\0PNG\0"})
    ctx = make_ctx()
    for path in ("../../luna.db", "/etc/passwd", "scripts/../../../luna.db", ""):
        if not path:
            continue
        result = await call(reg, ctx, "load_skill", name="greeter", path=path)
        assert result.is_error and DB_CANARY not in result.content, path
    binary = await call(reg, ctx, "load_skill", name="greeter", path="assets/logo.png")
    assert "binary file" in binary.content and "\0" not in binary.content
    missing = await call(reg, ctx, "load_skill", name="greeter", path="nope.md")
    assert missing.is_error and "scripts/hello.sh" in missing.content
    unknown = await call(reg, ctx, "load_skill", name="greter")
    assert unknown.is_error and "did you mean 'greeter'" in unknown.content


async def test_a_skill_script_runs_in_the_sandbox_read_only(
    tools_config: Any, make_ctx: Any, tmp_path: Path
) -> None:
    cfg, reg = installed(tools_config, tmp_path)
    folder = cfg.data_dir / "skills" / "greeter"
    ctx = make_ctx()
    ran = await call(reg, ctx, "bash", command=f"cd {folder} && sh scripts/hello.sh")
    assert f"hello from {folder}" in ran.content and "<untrusted" in ran.content
    tamper = await call(reg, ctx, "bash", command=f"echo x >> {folder}/SKILL.md; echo rc=$?")
    assert "rc=1" in tamper.content and "Read-only" in tamper.content
    assert (folder / "SKILL.md").read_text().endswith(BODY)
    steal = await call(reg, ctx, "bash", command=f"cat {cfg.memory.db_path}; echo rc=$?")
    assert DB_CANARY not in steal.content  # the rest of the data folder stays hidden


async def test_allowed_tools_narrow_the_rest_of_the_turn(
    tools_config: Any, make_ctx: Any, tmp_path: Path
) -> None:
    cfg = tools_config()
    store.add(cfg, make_skill(tmp_path / "src", "reader", allowed="Read Bash(git:*) Frobnicate"))
    reg = build_registry(cfg, probe=True)
    ctx = make_ctx()
    loaded = await call(reg, ctx, "load_skill", name="reader")
    assert "allows only: bash, load_skill, read_file" in loaded.content
    assert "Frobnicate ignored" in loaded.content
    refused = await call(reg, ctx, "write_file", path="x.txt", content="x")
    assert refused.is_error and "while the skill 'reader' is in use" in refused.content
    assert not (cfg.agent.workspace / "x.txt").exists()
    assert not (await call(reg, ctx, "bash", command="echo ok")).is_error


async def test_save_skill_asks_and_never_replaces_the_owners_skill(
    tools_config: Any, make_ctx: Any, tmp_path: Path
) -> None:
    cfg, reg = installed(tools_config, tmp_path)
    unattended = await call(
        reg, make_ctx(frontend="discord"), "save_skill",
        name="tidy-up", description="Tidies.", instructions="1. tidy",
    )  # fmt: skip
    assert unattended.is_error and "nobody can approve" in unattended.content
    asked: list[dict[str, Any]] = []

    async def approve(tool: str, args: dict[str, Any]) -> bool:
        asked.append(args)
        return True

    ctx = make_ctx(frontend="discord", approver=approve)
    saved = await call(
        reg, ctx, "save_skill", name="tidy-up", description="Tidies the inbox folder.",
        instructions="1. list ~/inbox\n2. move old files to ~/inbox/old",
    )  # fmt: skip
    assert not saved.is_error and "version 1" in saved.content
    assert asked[0]["instructions"].startswith("1. list ~/inbox")  # the owner saw it all
    taken = await call(
        reg, ctx, "save_skill", name="greeter", description="Mine.", instructions="x"
    )
    assert taken.is_error and "never replaces it" in taken.content
    body = await call(reg, ctx, "load_skill", name="tidy-up")
    assert "move old files" in body.content
