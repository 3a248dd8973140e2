"""Every third-party module Luna imports belongs to a distribution pyproject.toml declares.

The rule: walk every ``import x`` and ``from x import y`` (absolute, at any depth: lazy imports
inside functions count) in ``luna/``; drop the standard library, ``luna`` and ``__future__``;
map each remaining top-level name to its installed distributions with
``importlib.metadata.packages_distributions()``; at least one of them must be named in
``[project] dependencies`` or, for an optional import, the ``dev`` extra. So importing a package
that only arrives through another dependency (as aiohttp did through discord.py) fails here.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def normalized(name: str) -> str:
    """A distribution name as PEP 503 compares them (``discord.py`` == ``discord-py``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def declared_distributions() -> set[str]:
    """The distributions named in pyproject's dependencies and its dev extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    return {normalized(re.match(r"[A-Za-z0-9._-]+", req).group()) for req in requirements}


def third_party_imports(source: str) -> set[str]:
    """The top-level names of the absolute, non-stdlib, non-luna imports in ``source``."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    own = {"luna", "__future__"}
    return {n for n in names if n not in sys.stdlib_module_names and n not in own}


def undeclared(imported: Iterable[str], declared: set[str]) -> dict[str, list[str]]:
    """Imported top-level name -> its installed distributions, for each one not declared."""
    owners = importlib.metadata.packages_distributions()
    missing: dict[str, list[str]] = {}
    for name in sorted(set(imported)):
        dists = owners.get(name, [])
        if not {normalized(d) for d in dists} & declared:
            missing[name] = dists
    return missing


def test_every_import_in_luna_is_a_declared_dependency() -> None:
    imported: dict[str, list[str]] = {}
    for path in sorted((ROOT / "luna").rglob("*.py")):
        for name in third_party_imports(path.read_text()):
            imported.setdefault(name, []).append(str(path.relative_to(ROOT)))
    assert len(imported) > 20, imported  # the walk really found Luna's imports
    missing = undeclared(imported, declared_distributions())
    assert not missing, {name: (dists, imported[name][:3]) for name, dists in missing.items()}


def test_the_check_fails_on_a_package_that_only_comes_transitively() -> None:
    # certifi is installed (httpx needs it) and Luna does not declare it.
    source = "import os\nfrom luna import x\ndef f():\n    import certifi.core\n"
    assert third_party_imports(source) == {"certifi"}
    assert undeclared({"certifi"}, declared_distributions()) == {"certifi": ["certifi"]}
    assert undeclared({"not_installed_anywhere"}, declared_distributions()) == {
        "not_installed_anywhere": []
    }
    assert not undeclared({"discord"}, declared_distributions())  # discord.py == discord-py
