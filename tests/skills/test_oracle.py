"""Luna's skill reader against the reference library (skills-ref), the format's oracle.

Every skill below is written to a real folder; ``skills_ref.validate`` and Luna's
``read_skill`` must agree on whether it is valid, and on the errors. Luna's own limits (size,
binary, symlinks, file count) are beyond the format: the oracle calls those skills valid and
Luna leaves them out, each with one line (the last test).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import skills_ref

from luna.skills.folder import (
    MAX_FILES,
    MAX_FRONT_MATTER_BYTES,
    MAX_SKILL_MD_BYTES,
    Problem,
    Skill,
    read_skill,
)

OK = "description: Does one thing well. Use when the user asks for it.\n"
CASES: dict[str, tuple[str, str]] = {
    # name: (folder name, SKILL.md text)
    "minimal": ("pdf-tools", f"---\nname: pdf-tools\n{OK}---\nSteps.\n"),
    "all-optional-fields": (
        "data-report",
        "---\nname: data-report\ndescription: Builds the weekly data report.\n"
        "license: Apache-2.0\ncompatibility: Requires python3 and jq\n"
        "metadata:\n  author: example-org\n  version: '1.0'\n"
        "allowed-tools: Bash(jq:*) Read\n---\n# Report\n",
    ),
    "allowed-tools-as-list": (
        "git-helper",
        f"---\nname: git-helper\n{OK}allowed-tools:\n  - Bash(git:*)\n  - Read\n---\nx\n",
    ),
    "digits-and-hyphens": ("ocr-2-text", f"---\nname: ocr-2-text\n{OK}---\n"),
    "lowercase-skill-md": ("lower-case", f"---\nname: lower-case\n{OK}---\n"),
    "unicode-lowercase-name": ("café-notes", f"---\nname: café-notes\n{OK}---\n"),
    "no-front-matter": ("no-front", "# Just markdown\n"),
    "no-closing-dashes": ("open-ended", f"---\nname: open-ended\n{OK}"),
    "not-yaml": ("bad-yaml", "---\nname: [unclosed\ndescription: x\n---\n"),
    "front-matter-is-a-list": ("a-list", "---\n- name\n- description\n---\n"),
    "missing-name": ("no-name", f"---\n{OK}---\n"),
    "missing-description": ("no-desc", "---\nname: no-desc\n---\n"),
    "empty-description": ("empty-desc", "---\nname: empty-desc\ndescription: ''\n---\n"),
    "uppercase-name": ("PDF-Tools", f"---\nname: PDF-Tools\n{OK}---\n"),
    "leading-hyphen": ("-pdf", f"---\nname: -pdf\n{OK}---\n"),
    "trailing-hyphen": ("pdf-", f"---\nname: pdf-\n{OK}---\n"),
    "double-hyphen": ("pdf--tools", f"---\nname: pdf--tools\n{OK}---\n"),
    "underscore": ("pdf_tools", f"---\nname: pdf_tools\n{OK}---\n"),
    "name-too-long": ("a" * 65, f"---\nname: {'a' * 65}\n{OK}---\n"),
    "name-not-folder": ("folder-name", f"---\nname: other-name\n{OK}---\n"),
    "description-too-long": (
        "long-desc",
        f"---\nname: long-desc\ndescription: {'x' * 1025}\n---\n",
    ),
    "compatibility-too-long": (
        "compat",
        f"---\nname: compat\n{OK}compatibility: {'y' * 501}\n---\n",
    ),
    "unknown-field": ("extra-field", f"---\nname: extra-field\n{OK}version: 2\n---\n"),
    "duplicate-key": ("dupe-key", f"---\nname: dupe-key\nname: dupe-key\n{OK}---\n"),
}


def write(root: Path, folder: str, text: str, *, lower: bool = False) -> Path:
    path = root / folder
    path.mkdir(parents=True)
    (path / ("skill.md" if lower else "SKILL.md")).write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("case", sorted(CASES))
def test_oracle_and_luna_agree_on_the_format(tmp_path: Path, case: str) -> None:
    folder, text = CASES[case]
    path = write(tmp_path, folder, text, lower=case == "lowercase-skill-md")
    oracle = skills_ref.validate(path)
    luna = read_skill(path, "path")
    assert isinstance(luna, Skill) == (oracle == []), (case, oracle, luna)
    if isinstance(luna, Problem):
        assert list(luna.errors) == oracle  # the same errors, from the same rules
        assert "\n" not in luna.line and luna.fix  # one line, and what to do
    else:
        props = skills_ref.read_properties(path)
        assert (luna.name, luna.description) == (props.name, props.description)


def test_oracle_corpus_has_both_kinds() -> None:
    # A check that can't fail is a defect: the corpus must hold valid and invalid skills.
    assert {"minimal", "all-optional-fields"} <= set(CASES)
    assert len(CASES) >= 20


def test_luna_limits_beyond_the_format_leave_a_valid_skill_out(tmp_path: Path) -> None:
    big = write(tmp_path, "big-one", f"---\nname: big-one\n{OK}---\n" + "x" * MAX_SKILL_MD_BYTES)
    binary = write(tmp_path, "binary-one", f"---\nname: binary-one\n{OK}---\n\0\0\0")
    linked = write(tmp_path, "linked-one", f"---\nname: linked-one\n{OK}---\n")
    (linked / "secret").symlink_to("/etc/passwd")
    crowded = write(tmp_path, "crowded-one", f"---\nname: crowded-one\n{OK}---\n")
    for i in range(MAX_FILES + 1):
        (crowded / f"f{i}.txt").write_text("x")
    nested = "".join(" " * (i + 1) + f"k{i}:\n" for i in range(100)) + " " * 101 + "v: 1\n"
    deep = write(tmp_path, "deep-one", f"---\nname: deep-one\n{OK}metadata:\n{nested}---\n")
    keys = "".join(f"  k{i}: v{i}\n" for i in range(MAX_FRONT_MATTER_BYTES // 8))
    wide = write(tmp_path, "wide-one", f"---\nname: wide-one\n{OK}metadata:\n{keys}---\n")
    latin = write(tmp_path, "latin-one", "")
    (latin / "SKILL.md").write_bytes(f"---\nname: latin-one\n{OK}---\ncaf\xe9".encode("latin-1"))
    expected = {
        big: "over Luna's limit",
        binary: "a binary file",
        linked: "links out of the skill's folder",
        crowded: f"more than {MAX_FILES:,} files",
        latin: "not UTF-8",
        deep: "nested deeper than",  # the oracle's parser recurses (at ~300, out of stack)
        wide: "front matter over Luna's limit",  # and is quadratic in the keys
    }
    for path, what in expected.items():
        found = read_skill(path, "path")
        assert isinstance(found, Problem) and what in found.what, (path, found)
        assert "\n" not in found.line
    # The oracle calls all but the binary and the non-UTF-8 ones valid: Luna's own limits.
    assert skills_ref.validate(crowded) == [] and skills_ref.validate(linked) == []
