"""Skills in real turns: the piped ``python -m luna`` REPL against the scripted server.

The session's first request lists every enabled skill (level 1); the model loads one (level
2) and runs its script with bash (level 3). A skill added or removed while the session lives
does not move its head; loading the removed one says so in one line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from luna.agent.prompt import SKILLS_HEADER, skills_listed
from luna.config import build_config
from luna.skills import store
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.luna_process import data_env


def _call(name: str, args: dict[str, Any], call_id: str) -> Reply:
    return Reply(tool_calls=[{"name": name, "arguments": json.dumps(args), "id": call_id}])


def _repl(tmp_path: Path, url: str, lines: list[str]) -> str:
    (tmp_path / "mcp_servers.json").write_text('{"servers": {}}')
    proc = subprocess.run(
        [sys.executable, "-m", "luna", "repl"],
        cwd=tmp_path,
        env=data_env(tmp_path, url),
        input="".join(f"{line}\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout


def _skill(root: Path, name: str, line: str) -> Path:
    folder = root / name
    (folder / "scripts").mkdir(parents=True)
    (folder / "SKILL.md").write_text(
        f"---\nname: {name}\ndescription: {line}\n---\nRun scripts/go.sh from the folder.\n"
    )
    (folder / "scripts" / "go.sh").write_text(f"#!/bin/sh\necho {name} ran in $(pwd)\n")
    return folder


def _results(requests: list[dict[str, Any]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for r in requests:
        out.update({m["tool_call_id"]: m["content"] for m in r["messages"] if m["role"] == "tool"})
    return out


def test_skills_listed_loaded_and_run_in_a_repl_turn(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    cfg = build_config({}, {"MEMORY_DB_PATH": str(tmp_path / "data" / "luna.db")},
                       base_dir=tmp_path)  # fmt: skip
    store.add(cfg, _skill(tmp_path / "src", "deploy-site", "Deploys the site. Use for deploys."))
    folder = cfg.data_dir / "skills" / "deploy-site"
    llm_server.script(
        _call("load_skill", {"name": "deploy-site"}, "c1"),
        _call("bash", {"command": f"cd {folder} && sh scripts/go.sh"}, "c2"),
        Reply(content="Deployed."),
    )
    out = _repl(tmp_path, llm_server.url, ["deploy the site"])
    first = llm_server.requests[0]
    listed = skills_listed(first["messages"][0]["content"])
    assert listed["deploy-site"] == "Deploys the site. Use for deploys."
    assert {"scheduling", "workspace-notes", "writing-skills"} <= set(listed)
    names = [t["function"]["name"] for t in first["tools"]]
    assert {"load_skill", "save_skill"} <= set(names)
    results = _results(llm_server.requests)
    assert "Run scripts/go.sh from the folder." in results["c1"]
    assert "<untrusted" not in results["c1"]
    assert f"deploy-site ran in {folder}" in results["c2"] and "<untrusted" in results["c2"]
    assert "Deployed." in out


def test_skills_head_is_kept_when_skills_come_and_go(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    cfg = build_config({}, {"MEMORY_DB_PATH": str(tmp_path / "data" / "luna.db")},
                       base_dir=tmp_path)  # fmt: skip
    store.add(cfg, _skill(tmp_path / "src", "old-one", "The old one. Use for old things."))
    llm_server.script(Reply(content="Hi."))
    _repl(tmp_path, llm_server.url, ["hello"])
    head = llm_server.requests[0]["messages"][0]["content"]
    store.remove(cfg, "old-one")  # while the session lives (it resumes below)
    store.add(cfg, _skill(tmp_path / "src", "new-one", "The new one. Use for new things."))
    llm_server.script(_call("load_skill", {"name": "old-one"}, "c1"), Reply(content="Gone."))
    _repl(tmp_path, llm_server.url, ["use the old one"])
    again = llm_server.requests[1:]
    assert all(r["messages"][0]["content"] == head for r in again)  # byte-identical head
    assert "old-one" in skills_listed(head) and "new-one" not in skills_listed(head)
    gone = _results(again)["c1"]
    assert "no skill 'old-one' now" in gone and "new-one" in gone  # one line, what exists
    assert SKILLS_HEADER in head
