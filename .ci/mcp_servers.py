#!/usr/bin/env python3
"""Install the public npm MCP servers the tests run, once, into a cache keyed by their versions.

    python3 .ci/mcp_servers.py             install (or reuse) and print the cache folder
    python3 .ci/mcp_servers.py --print     only print where the cache folder is (or would be)

Why: the MCP tests run reference servers nobody here wrote (``@modelcontextprotocol/
server-everything``), as a new user would. ``npx -y`` at test time would reach the registry
on every run and pick whatever version is newest; this script installs the pinned versions
with ``npm install`` into ``~/.cache/luna/mcp-npm-<key>/`` (``LUNA_CACHE_DIR`` or
``XDG_CACHE_HOME`` move it), where ``<key>`` hashes the pinned package list and Node's major
version. A later run finds the folder and does nothing. The folder is built beside its final
place and renamed into it, so a half-installed cache entry never exists.

The Python reference servers (``mcp-server-fetch``, ``mcp-server-git``) are dev extras in
pyproject.toml, installed with the rest of the dev lock.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llama_server  # (the sibling script owns Luna's cache root)

# Pinned: the tests assert on these servers' behaviour (tool names, resources, timings).
PACKAGES = {"@modelcontextprotocol/server-everything": "2026.8.31"}


def _node_major() -> str:
    node = shutil.which("node")
    if node is None:
        return "none"
    out = subprocess.run([node, "--version"], capture_output=True, text=True, check=False)
    return out.stdout.strip().lstrip("v").split(".")[0] or "unknown"


def cache_dir() -> Path:
    key = json.dumps({"packages": PACKAGES, "node": _node_major()}, sort_keys=True)
    return llama_server.cache_root() / f"mcp-npm-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def _complete(folder: Path) -> bool:
    return all((folder / "node_modules" / name / "package.json").is_file() for name in PACKAGES)


def install(target: Path) -> None:
    npm = shutil.which("npm")
    if npm is None:
        sys.exit("npm is not installed: apt-get install nodejs npm, then run this again")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".mcp-npm-") as tmp:
        staged = Path(tmp) / "pkg"
        staged.mkdir()
        (staged / "package.json").write_text(json.dumps({"private": True}) + "\n")
        specs = [f"{name}@{version}" for name, version in PACKAGES.items()]
        subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--save-exact", "--prefix", staged, *specs],
            check=True,
            stdout=sys.stderr,
        )
        if not _complete(staged):
            sys.exit(f"npm install finished but {', '.join(PACKAGES)} is missing in {staged}")
        try:
            os.replace(staged, target)  # atomic: a half-installed cache entry never exists
        except OSError:
            if not _complete(target):  # another install won the race: fine if it is whole
                raise


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--print", action="store_true", help="only print the cache folder")
    args = parser.parse_args()
    target = cache_dir()
    if not args.print and not _complete(target):
        print(f"installing {', '.join(PACKAGES)} into {target}…", file=sys.stderr)
        install(target)
    print(target)


if __name__ == "__main__":
    main()
