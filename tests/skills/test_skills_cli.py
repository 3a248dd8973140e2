"""``luna skills ...`` run for real (``python -m luna``) on real folders.

Skills written in the public format install, list, show, disable and come out again; bad
folders are left out with one line each and never a traceback; a learned skill's versions
can be compared and reverted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from luna.config import build_config
from luna.skills import learned
from tests.luna_process import clean_env

GOOD = "---\nname: {name}\ndescription: {desc}\n---\n# {name}\n\nRun `scripts/hello.sh`.\n"


HELLO = "Says hello. Use when greeting."


def skill(root: Path, name: str, desc: str = HELLO, **files: str) -> Path:
    folder = root / name
    (folder / "scripts").mkdir(parents=True)
    (folder / "SKILL.md").write_text(GOOD.format(name=name, desc=desc), encoding="utf-8")
    (folder / "scripts" / "hello.sh").write_text("#!/bin/sh\necho hello from the skill\n")
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text, encoding="utf-8")
    return folder


@pytest.fixture
def luna(tmp_path: Path) -> Any:
    config = tmp_path / "config.toml"
    paths = tmp_path / "checkout"
    paths.mkdir()
    config.write_text(f'[memory]\ndb_path = "data/luna.db"\n\n[skills]\npaths = ["{paths}"]\n')

    def run(*args: str, code: int | None = 0) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "luna", "--config", str(config), "skills", *args],
            env=clean_env(),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert "Traceback" not in proc.stderr, proc.stderr
        if code is not None:
            assert proc.returncode == code, (proc.stdout, proc.stderr)
        return proc

    run.config = config  # type: ignore[attr-defined]
    run.checkout = paths  # type: ignore[attr-defined]
    return run


def listed(luna: Any) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in json.loads(luna("list", "--json").stdout)["skills"]}


def test_skills_cli_add_list_show_disable_remove(luna: Any, tmp_path: Path) -> None:
    source = skill(tmp_path / "mine", "greeter", **{"references/notes.md": "more"})
    added = luna("add", str(source))
    assert "installed greeter" in added.stdout
    skills = listed(luna)
    assert skills["greeter"]["source"] == "installed" and skills["greeter"]["enabled"]
    assert skills["greeter"]["folder"] == str(tmp_path / "data" / "skills" / "greeter")
    assert set(skills["greeter"]["files"]) == {"scripts/hello.sh", "references/notes.md"}
    assert {"scheduling", "workspace-notes", "writing-skills"} <= set(skills)  # bundled
    assert all(skills[n]["source"] == "bundled" for n in ("scheduling", "writing-skills"))
    shown = luna("show", "greeter").stdout
    assert "greeter (installed)" in shown and "Run `scripts/hello.sh`." in shown
    table = luna("list").stdout
    assert "greeter" in table and "installed" in table and "enabled" in table
    luna("disable", "greeter")
    assert listed(luna)["greeter"]["enabled"] is False
    luna("enable", "greeter")
    assert listed(luna)["greeter"]["enabled"] is True
    again = luna("add", str(source), code=1)
    assert "already at" in again.stderr and len(again.stderr.strip().splitlines()) == 1
    luna("remove", "greeter")
    assert "greeter" not in listed(luna) and source.exists()  # the original is untouched
    bundled = luna("remove", "scheduling", code=1)
    assert "disable" in bundled.stderr and "scheduling" in listed(luna)


def test_skills_cli_bad_folders_are_left_out_one_line_each(luna: Any, tmp_path: Path) -> None:
    checkout: Path = luna.checkout
    skill(checkout, "fine-one")
    nested = checkout / "skills"
    skill(nested, "deeper-one")  # repo/skills/NAME is found too
    bad = {
        "no-closing": "---\nname: no-closing\ndescription: x\n",
        "not-yaml": "---\nname: [oops\n---\n",
        "Wrong-Case": "---\nname: Wrong-Case\ndescription: x\n---\n",
        "mismatch": "---\nname: other\ndescription: x\n---\n",
    }
    for name, text in bad.items():
        (checkout / name).mkdir()
        (checkout / name / "SKILL.md").write_text(text)
    (checkout / "huge").mkdir()
    huge = "---\nname: huge\ndescription: x\n---\n" + "y" * 200_000
    (checkout / "huge" / "SKILL.md").write_text(huge)
    escaping = skill(checkout, "escaping")
    (escaping / "passwd").symlink_to("/etc/passwd")
    skill(tmp_path / "mine", "scheduling")  # a second skill of a bundled name
    luna("add", str(tmp_path / "mine" / "scheduling"))
    data = json.loads(luna("list", "--json").stdout)
    names = {s["name"]: s["source"] for s in data["skills"]}
    assert names["fine-one"] == "path" and names["deeper-one"] == "path"
    assert names["scheduling"] == "installed"  # the owner's copy wins over the bundled one
    left = {Path(p["file"]).parent.name: p for p in data["left_out"]}
    assert set(left) >= {*bad, "huge", "escaping", "scheduling"}, left
    assert "second skill named 'scheduling'" in left["scheduling"]["problem"]
    assert all("\n" not in p["problem"] and p["fix"] for p in data["left_out"])
    check = luna("check", code=1)
    assert check.stdout.count("left out:") == len(data["left_out"])
    one = luna("check", str(checkout / "mismatch"), code=1)
    assert "must match skill name" in one.stdout and "fix: rename the folder" in one.stdout
    assert "ok: fine-one" in luna("check", str(checkout / "fine-one")).stdout
    refused = luna("add", str(checkout / "not-yaml"), code=1)
    assert refused.stderr.startswith("luna skills add: not installed:")


def test_skills_cli_shows_hostile_text_as_text(luna: Any, tmp_path: Path) -> None:
    source = skill(tmp_path / "mine", "sly")
    body = "Steps.\n\x1b]52;c;aGk=\x07 clipboard, \x1b[2J clear, \xc2\x9b C1\n"
    (source / "SKILL.md").write_text(GOOD.format(name="sly", desc=HELLO) + body)
    luna("add", str(source))
    odd = luna.checkout / "odd\x1b[31mred"
    odd.mkdir()
    (odd / "SKILL.md").write_text("---\nname: odd\ndescription: x\x1b[2J\n---\n")
    out = luna("list").stdout + luna("show", "sly").stdout
    assert "\x1b" not in out and "\x07" not in out and "␛" in out
    assert "control character (U+001B)" in out  # the odd one is left out, said as text


def test_skills_cli_learned_versions_diff_and_revert(luna: Any, tmp_path: Path) -> None:
    cfg = build_config({"memory": {"db_path": str(tmp_path / "data" / "luna.db")}}, {},
                       base_dir=tmp_path)  # fmt: skip
    prov = {"luna-session": "repl-1", "luna-turn": "t1"}
    first = learned.save(cfg, "backup-check", "Checks the backups.", "1. ls backups", prov)
    second = learned.save(cfg, "backup-check", "Checks the backups.", "1. ls -l backups", prov)
    assert (first.metadata["luna-version"], second.metadata["luna-version"]) == ("1", "2")
    assert second.metadata["luna-session"] == "repl-1" and "luna-saved" in second.metadata
    assert listed(luna)["backup-check"]["source"] == "learned"
    diff = luna("diff", "backup-check").stdout
    assert "-1. ls backups" in diff and "+1. ls -l backups" in diff
    assert "version 1" in luna("revert", "backup-check").stdout
    assert "1. ls backups" in luna("show", "backup-check").stdout
    assert len(learned.versions(cfg, "backup-check")) == 3  # history only grows
    assert "-1. ls -l backups" in luna("diff", "backup-check").stdout
    with pytest.raises(Exception, match="owner keeps"):
        learned.save(cfg, "scheduling", "Mine now.", "x", prov)  # a bundled skill's name
    assert "no earlier version" in luna("revert", "scheduling", code=1).stderr
