"""``luna doctor --only skills`` run for real: counts by source, and each skill left out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.luna_process import clean_env


def test_doctor_skills_counts_and_names_what_is_left_out(tmp_path: Path) -> None:
    installed = tmp_path / "data" / "skills"
    (installed / "good-one").mkdir(parents=True)
    (installed / "good-one" / "SKILL.md").write_text(
        "---\nname: good-one\ndescription: Works. Use when asked.\n---\nSteps.\n"
    )
    (installed / "Bad\x1b[2J").mkdir()
    (installed / "Bad\x1b[2J" / "SKILL.md").write_text("---\nname: bad\n---\n")
    proc = subprocess.run(
        [sys.executable, "-m", "luna", "doctor", "--only", "skills", "--json"],
        env=clean_env(MEMORY_DB_PATH=str(tmp_path / "data" / "luna.db")),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr  # a bad skill is a warning: Luna still runs
    results = json.loads(proc.stdout)["checks"]
    summary = next(r for r in results if r["name"] == "skills")
    assert summary["detail"] == "4 enabled (3 bundled, 1 installed), 1 left out"
    bad = next(r for r in results if r["name"] == "skill bad")
    assert bad["ok"] is False and not bad["essential"]
    assert "must match skill name" in bad["detail"] and "\x1b" not in bad["detail"]
    assert "rename the folder" in bad["fix"]
