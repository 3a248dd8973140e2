"""The paths and modules README.md and docs/*.md name in backticks exist, so the docs cannot drift.

What is checked, in inline backticks outside fenced code blocks (a fence holds commands to
type, not references):
- A repo path: any word starting ``luna/``, ``tests/``, ``bench/``, ``.ci/`` or ``docs/``, also
  inside a command (``bash .ci/lock``). It must exist (a trailing ``/`` means a directory).
- A package-relative path: a whole backticked ``pkg/...`` whose first part is a package of
  ``luna/`` (``memory/storage/held.py``, ``memory/recall/``) and which ends in ``/`` or in a file
  name with an extension; it must exist under ``luna/``. Without an extension it is not a path
  (``tools/list`` is an MCP method) and is skipped.
- A bare file name ``name.py``: the doc places it by the paths named in the same section (the
  text since the last heading). It must exist inside one of the directories of those paths other
  than the bare root ``luna/`` (in the directory or below it); a section that names no such
  directory places it anywhere under ``luna/``.
- A dotted module ``luna.x.y``, optionally followed by one attribute (``luna.memory.Memory``):
  the longest prefix must be a module or package, and a remaining attribute must be a name the
  module's source mentions. File names that look dotted (``luna.db``, ``luna.lock``) are skipped.
Anything holding a placeholder (``<model>``, ``NAME``, ``*``, ``{id}``) is skipped, and so is the
data folder (``data/...``: made at run time, not in the repo).

And docs/ARCHITECTURE.md's Contracts section names the seams that exist: its table of Protocols
has a row for every ``typing.Protocol`` class under ``luna/`` (read with ``ast``), each naming
the module that defines it, and no row for a Protocol that does not exist.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PACKAGES = {p.name for p in (ROOT / "luna").iterdir() if (p / "__init__.py").is_file()}
REPO_PATH = re.compile(r"(?<![\w./-])((?:luna|tests|bench|\.ci|docs)/[\w./-]*)")
INLINE_CODE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
DOTTED = re.compile(r"^luna(?:\.[A-Za-z_]\w*)+$")
FILE_SUFFIXES = {"db", "lock", "jsonl", "env", "lan", "toml", "json", "md", "log", "secret", "sh"}
PLACEHOLDER = re.compile(r"[<>*{}]|\b[A-Z]{2,}\b")


def sections(text: str) -> list[list[str]]:
    """The inline-code spans of each section (split at headings), fenced blocks left out."""
    found: list[list[str]] = [[]]
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            found.append(INLINE_CODE.findall(line))
        elif not fenced:
            found[-1].extend(INLINE_CODE.findall(line))
    return found


def named_paths(spans: list[str]) -> list[str]:
    """The repo paths (relative to the repo root) the spans name, by the first two rules."""
    paths = []
    for span in spans:
        if PLACEHOLDER.search(span):
            continue
        paths.extend(m.rstrip(".") for m in REPO_PATH.findall(span))
        first = span.split("/")[0]
        if " " not in span and "/" in span and first in PACKAGES:
            last = span.rstrip("/").rsplit("/", 1)[-1]
            if span.endswith("/") or "." in last:
                paths.append(f"luna/{span}")
    return paths


def place_of_bare(name: str, paths: list[str]) -> str | None:
    """Where a bare ``name.py`` is, judged by the section's paths; None when it is nowhere."""
    dirs = {str(Path(p) if p.endswith("/") else Path(p).parent) for p in paths}
    dirs = {d for d in dirs if d not in ("luna", ".")} or {"luna"}
    for d in sorted(dirs):
        hits = sorted((ROOT / d).rglob(name)) if (ROOT / d).is_dir() else []
        if hits:
            return str(hits[0].relative_to(ROOT))
    return None


def dotted_exists(name: str) -> bool:
    """True when ``luna.a.b`` is a module, or ``luna.a.B`` is a module and a name in it."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:cut])
        module = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if module.is_file():
            rest = parts[cut:]
            if not rest:
                return True
            return len(rest) == 1 and re.search(rf"\b{rest[0]}\b", module.read_text()) is not None
    return False


def drift(doc: Path) -> list[str]:
    """Every reference in ``doc`` that names nothing in the repo."""
    missing = []
    for spans in sections(doc.read_text()):
        paths = named_paths(spans)
        missing += [p for p in paths if not (ROOT / p).exists()]
        for span in spans:
            if re.fullmatch(r"[\w-]+\.py", span) and place_of_bare(span, paths) is None:
                missing.append(span)
            if DOTTED.match(span) and span.rsplit(".", 1)[-1] not in FILE_SUFFIXES:
                if not dotted_exists(span):
                    missing.append(span)
    return missing


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_path_and_module_a_doc_names_exists(doc: Path) -> None:
    assert not drift(doc), f"{doc.name} names what does not exist: {drift(doc)}"


def test_the_rules_find_drift() -> None:
    spans = ["memory/held.py", "luna/nowhere.py", "bash .ci/lock", "tools/list", "data/x.db"]
    assert named_paths(spans) == ["luna/memory/held.py", "luna/nowhere.py", ".ci/lock"]
    assert place_of_bare("writes.py", ["luna/memory/"]) == "luna/memory/storage/writes.py"
    assert place_of_bare("writes.py", ["luna/mcp/rpc.py"]) is None
    assert dotted_exists("luna.memory.Memory") and dotted_exists("luna.hooks")
    assert not dotted_exists("luna.memory.Nothing") and not dotted_exists("luna.nothing")


ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"
# A row of the seams table: | `Name` | `module/path.py` | ...
PROTOCOL_ROW = re.compile(r"^\|\s*`(\w+)`\s*\|\s*`([\w/.]+\.py)`\s*\|", re.MULTILINE)


def contracts_section(text: str) -> str:
    """The text of the ``## Contracts`` section, up to the next ``## `` heading."""
    start = text.index("\n## Contracts\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def protocols_in_code() -> dict[str, str]:
    """Every Protocol class under luna/: name -> its module's path relative to luna/."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "luna").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ClassDef) and any(
                (isinstance(b, ast.Name) and b.id == "Protocol")
                or (isinstance(b, ast.Attribute) and b.attr == "Protocol")
                for b in node.bases
            ):
                assert node.name not in found, f"two Protocols named {node.name}"
                found[node.name] = str(path.relative_to(ROOT / "luna"))
    return found


def protocols_in_docs(text: str) -> dict[str, str]:
    """The Contracts section's table rows: Protocol name -> the module it names."""
    return dict(PROTOCOL_ROW.findall(contracts_section(text)))


def test_contracts_name_every_protocol_and_only_those() -> None:
    in_code, in_docs = protocols_in_code(), protocols_in_docs(ARCHITECTURE.read_text())
    missing = sorted(set(in_code) - set(in_docs))
    invented = sorted(set(in_docs) - set(in_code))
    assert not missing, f"Protocols the Contracts section does not name: {missing}"
    assert not invented, f"ARCHITECTURE.md names Protocols that do not exist: {invented}"
    moved = {n: (in_docs[n], in_code[n]) for n in in_code if in_docs[n] != in_code[n]}
    assert not moved, f"(docs, code) modules differ: {moved}"
    assert {"ChatModel", "SessionMemory", "ToolRunner", "Frontend"} <= set(in_code)


def test_the_contracts_rules_find_drift() -> None:
    text = (
        "# A\n\n## Contracts\n| Protocol | Module |\n|---|---|\n"
        "| `ChatModel` | `llm/contract.py` | x |\n| `Ghost` | `llm/ghost.py` | y |\n"
        "## Next\n| `Later` | `a/b.py` | z |\n"
    )
    assert protocols_in_docs(text) == {"ChatModel": "llm/contract.py", "Ghost": "llm/ghost.py"}
    assert protocols_in_code()["ChatModel"] == "llm/contract.py"
