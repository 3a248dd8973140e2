"""The package layering holds: a lower layer never imports a higher one (front-ends above all).

Every import in luna/ is read with ``ast`` (lazy imports inside functions included), so a
forbidden import fails here even when it would only run on some code path.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.luna_process import REPO

LUNA = REPO / "luna"
# package -> packages it must never import. Front-ends sit on top; app.py and __main__.py
# compose everything; doctor may probe any part below the front-ends; hooks (webhook events)
# stand on the scheduler's deliveries, under the web front-end that receives them.
ABOVE_OBSERVE = {
    "agent",
    "llm",
    "memory",
    "tools",
    "mcp",
    "frontends",
    "doctor",
    "scheduler",
    "skills",
    "hooks",
    "attachments",
}
FORBIDDEN: dict[str, set[str]] = {
    "config": ABOVE_OBSERVE | {"observe"},
    "observe": ABOVE_OBSERVE,
    "llm": {"agent", "memory", "tools", "mcp", "frontends", "doctor", "scheduler", "hooks"},
    "memory": {"agent", "tools", "mcp", "frontends", "doctor", "scheduler", "hooks"},
    "tools": {"agent", "mcp", "frontends", "doctor", "scheduler", "hooks"},
    "mcp": {"agent", "frontends", "doctor", "scheduler", "hooks"},
    "agent": {"frontends", "doctor", "mcp", "scheduler", "hooks"},
    "scheduler": {"frontends", "doctor", "hooks"},
    "hooks": {"frontends", "doctor"},
    "doctor": {"frontends"},
    # Files sent with a message: below the agent and the front-ends, beside the tools (their
    # output pipeline shapes a long document; read_file converts documents through it).
    "attachments": {"agent", "llm", "memory", "mcp", "frontends", "doctor", "scheduler", "hooks",
                    "skills"},
    "skills": {"agent", "llm", "memory", "tools", "mcp", "frontends", "doctor", "scheduler",
               "hooks"},
}  # fmt: skip
LEAVES = {
    "messages.py": {"*"},
    "errors.py": {"*"},
    "tasks.py": {"*"},
}  # import no other Luna module
# Inside luna.memory: part -> the parts it must never import ("facade" is luna/memory/__init__,
# "top" the librarian and the command modules beside it). Storage is the floor; embedding and
# recall stand on it and not on each other; only the facade and the commands join them.
MEMORY_PARTS = ("storage", "embedding", "recall")
MEMORY_FORBIDDEN: dict[str, set[str]] = {
    "storage": {"embedding", "recall", "facade", "top"},
    "embedding": {"recall", "facade", "top"},
    "recall": {"embedding", "facade", "top"},
}


def imported_modules(path: Path) -> set[str]:
    """Every dotted module name a file imports, anywhere in it (``from a import b`` gives a.b)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def memory_part(name: str) -> str | None:
    """Which part of luna.memory a dotted name is in (None: outside luna.memory)."""
    parts = name.split(".")
    if parts[:2] != ["luna", "memory"]:
        return None
    if len(parts) == 2 or parts[2][:1].isupper() or parts[2] == "__init__":
        return "facade"  # luna.memory itself, or a name the facade exports (Memory, ...)
    if parts[2] in MEMORY_PARTS:
        return parts[2]
    top = LUNA / "memory" / f"{parts[2]}.py"
    return "top" if top.exists() else "facade"


def luna_imports(path: Path) -> set[str]:
    """The ``luna.<package>`` names a module imports, anywhere in it."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "luna" and len(parts) > 1:
                found.add(parts[1])
    return found


def test_layers_lower_packages_never_import_higher_ones() -> None:
    problems = []
    for package, banned in FORBIDDEN.items():
        for path in sorted((LUNA / package).rglob("*.py")):
            bad = luna_imports(path) & banned
            if bad:
                problems.append(f"{path.relative_to(REPO)} imports luna.{', luna.'.join(bad)}")
    for name in LEAVES:
        imported = luna_imports(LUNA / name) - {name.removesuffix(".py")}
        if imported:
            problems.append(f"luna/{name} imports luna.{', luna.'.join(imported)}")
    assert not problems, "\n".join(problems)


def test_layers_memory_parts_stand_on_storage_and_not_on_each_other() -> None:
    problems = []
    for part, banned in MEMORY_FORBIDDEN.items():
        for path in sorted((LUNA / "memory" / part).rglob("*.py")):
            for name in sorted(imported_modules(path)):
                if memory_part(name) in banned:
                    problems.append(f"{path.relative_to(REPO)} imports {name}")
    assert not problems, "\n".join(problems)
    # Every module of luna.memory is in a part, the facade, or one of the few beside it.
    beside = {p.stem for p in (LUNA / "memory").glob("*.py")} - {"__init__"}
    known = {"librarian", "cli", "db_cli", "browse", "reindex", "contract", "related", "sessions"}
    known |= {"sessions_cli"}
    assert beside <= known, sorted(beside)


def test_layers_memory_check_sees_a_part_importing_another(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("from luna.memory.embedding import encoder\nfrom luna.memory import Memory\n")
    parts = {memory_part(name) for name in imported_modules(probe)}
    assert parts == {"embedding", "facade"}  # what storage must never import


def test_layers_every_package_says_its_job_and_what_it_may_import() -> None:
    for init in sorted(LUNA.rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert len(doc) > 40, f"{init.relative_to(REPO)} has no docstring stating its job"


def test_layers_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from luna.frontends.repl import Repl\n    import luna.agent\n")
    assert luna_imports(probe) == {"frontends", "agent"}  # lazy imports count too
