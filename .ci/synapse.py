#!/usr/bin/env python3
"""Install Synapse, the Matrix homeserver the Matrix tests run, into a virtualenv of its own.

    python3 .ci/synapse.py            install (or reuse) and print the virtualenv's folder
    python3 .ci/synapse.py --print    only print where it is (or would be)

Why: the Matrix adapter is tested against a real homeserver (``matrix-synapse`` from PyPI, on
SQLite, on loopback), never a fake. Synapse pins dozens of packages (Twisted, its own Rust
extension, …) that must not meet Luna's, so it lives in its own virtualenv under
``~/.cache/luna/synapse-<version>-py<X.Y>/`` (``LUNA_CACHE_DIR`` or ``XDG_CACHE_HOME`` move
it), keyed by the pinned Synapse version and the Python it runs on. A later run finds the
folder and does nothing. The virtualenv is built beside its final place and renamed into it,
so a half-installed cache entry never exists (the tests start it as
``<venv>/bin/python -m synapse.app.homeserver``, so the rename does not matter to it).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

VERSION = "1.163.2"  # matrix-synapse; the tests rely on its admin API and rate-limit overrides


def cache_root() -> Path:
    base = os.environ.get("LUNA_CACHE_DIR") or os.environ.get("XDG_CACHE_HOME")
    return Path(base) / "luna" if base else Path.home() / ".cache" / "luna"


def cache_dir() -> Path:
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    return cache_root() / f"synapse-{VERSION}-py{py}"


def _works(folder: Path) -> bool:
    python = folder / "bin" / "python"
    if not python.exists():
        return False
    probe = "import synapse, synapse.app.homeserver; print(synapse.__version__)"
    try:
        out = subprocess.run(
            [str(python), "-c", probe], capture_output=True, text=True, timeout=120, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and out.stdout.strip() == VERSION


def _uv() -> str | None:
    """uv beside this interpreter (Luna's venv has it) or on PATH; None: use pip."""
    beside = Path(sys.executable).parent / "uv"
    return str(beside) if beside.exists() else shutil.which("uv")


def install(target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".synapse-") as tmp:
        staged = Path(tmp) / "venv"
        uv = _uv()
        venv.EnvBuilder(with_pip=uv is None).create(staged)
        python = staged / "bin" / "python"
        if uv is not None:
            cmd = [uv, "pip", "install", "-q", "--python", str(python)]
        else:
            cmd = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        print(f"synapse: installing matrix-synapse {VERSION} into its own venv…", file=sys.stderr)
        subprocess.run([*cmd, f"matrix-synapse=={VERSION}"], check=True, stdout=sys.stderr)
        if not _works(staged):
            sys.exit(f"synapse: matrix-synapse {VERSION} installed but does not import")
        try:
            os.replace(staged, target)  # atomic: a half-installed cache entry never exists
        except OSError:
            if not _works(target):  # another install won the race: fine if it is whole
                raise


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--print", action="store_true", help="only print the folder")
    args = parser.parse_args()
    target = cache_dir()
    if not args.print and not _works(target):
        shutil.rmtree(target, ignore_errors=True)
        install(target)
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
