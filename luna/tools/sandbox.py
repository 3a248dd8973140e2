"""Confinement for tool subprocesses: an allowlisted environment and the bubblewrap command.

``tool_env(cfg)`` is the only way a tool subprocess (bash, MCP servers) gets an environment.
``bwrap_command(cfg, argv, cwd)`` wraps a command so that, inside:

- the whole filesystem is read-only, except the workspace and ``tools.write_roots``;
- ``/tmp`` and ``/dev/shm`` are private tmpfs of a bounded size (``tools.bash_tmp_mb``, see
  ``luna.tools.limits``); ``/run`` (an empty tmpfs) and the minimal ``/dev`` are read-only, so
  no RAM-backed folder can grow without bound; ``/proc`` belongs to a new PID namespace
  (Luna's own ``/proc/<pid>/environ`` is not visible);
- Luna's data folder (database, logs, tool outputs, ``.env``) is covered by an empty read-only
  tmpfs, even though the workspace lives inside it by default (it is bound back on top);
  private files outside it (the ``.env`` next to config.toml, ``mcp_servers.json``) are
  covered by an empty read-only file; the skills' folders in it are bound back, read-only;
- the network is a new empty namespace unless ``tools.network`` is true;
- no capabilities, even when Luna runs as root (``--cap-drop ALL``), so nothing can be
  remounted;
- the child dies with Luna (``--die-with-parent``) and cannot reach the terminal
  (``--new-session``); the environment is cleared and rebuilt from the allowlist.

Invariants:
- ``DISCORD_TOKEN``, ``LLM_API_KEY``, every name in ``tools.secret_env`` and every variable whose
  value is a configured secret never reach a tool environment, whatever the passthrough says.
- ``sandbox_status`` never raises; ``probe=True`` runs a short subprocess (call it off the loop).
  ``build_registry`` calls it once per registry and keeps the answer as ``registry.sandbox``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import NamedTuple

from luna.config import Config, secret_values
from luna.skills.library import readable_roots
from luna.tools.limits import INTERPRETER, Limits


class SandboxStatus(NamedTuple):
    """Whether bash runs inside bubblewrap, and why (or why not and what to do)."""

    ok: bool
    detail: str


NOT_CHECKED = SandboxStatus(False, "sandbox not checked; bash asks before every command")

BASE_ENV = ("PATH", "LANG", "LC_ALL", "TERM", "TZ")
NEVER_ENV = frozenset({"DISCORD_TOKEN", "LLM_API_KEY"})
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def tool_env(cfg: Config, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a tool subprocess, built from an allowlist."""
    source = dict(os.environ if environ is None else environ)
    blocked = NEVER_ENV | set(cfg.tools.secret_env)
    secrets = set(secret_values(cfg))
    env: dict[str, str] = {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8"}
    for name in (*BASE_ENV, *cfg.tools.env_passthrough):
        if name in source and name not in blocked and source[name] not in secrets:
            env[name] = source[name]
    env["HOME"] = str(cfg.agent.workspace)
    env["LUNA_WORKSPACE"] = str(cfg.agent.workspace)
    return env


def protected_paths(cfg: Config) -> list[Path]:
    """Luna's private files and folders: never readable by tools."""
    paths = [
        cfg.data_dir,
        cfg.memory.db_path,
        cfg.observe.log_dir,
        cfg.tools.outputs_dir,
        cfg.data_dir / ".env",
        cfg.base_dir / ".env",
        cfg.mcp.servers_file,  # may hold literal headers or env values for MCP servers
    ]
    out: list[Path] = []
    for p in paths:
        rp = p.resolve()
        if rp not in out:
            out.append(rp)
    return out


def bwrap_command(
    cfg: Config, argv: list[str], cwd: Path, env: dict[str, str] | None = None
) -> list[str]:
    """The bwrap command line that runs ``argv`` confined (see the module docstring)."""
    workspace = cfg.agent.workspace.resolve()
    writable = [workspace, *(p.resolve() for p in cfg.tools.write_roots)]
    limits = Limits.from_config(cfg)
    cmd = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    cmd += ["--size", str(limits.shm_bytes), "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
    cmd += ["--size", str(limits.tmp_bytes), "--tmpfs", "/tmp"]
    if not cfg.tools.network:  # host sockets (dbus, docker) out of reach
        cmd += ["--tmpfs", "/run", "--remount-ro", "/run"]
    hidden_dirs: list[Path] = []
    for p in protected_paths(cfg):
        if p.is_dir() and not any(p.is_relative_to(h) for h in hidden_dirs):
            hidden_dirs.append(p)
            cmd += ["--tmpfs", str(p)]
    for w in writable:
        w.mkdir(parents=True, exist_ok=True)
        cmd += ["--bind", str(w), str(w)]
    # Skills in the data folder (installed, learned) are shown again, read-only, at their own
    # path, so a skill's scripts run where load_skill says they are.
    for root in readable_roots(cfg):
        root = root.resolve()
        if root.is_dir() and any(root.is_relative_to(h) for h in hidden_dirs):
            cmd += ["--ro-bind", str(root), str(root)]
    for h in hidden_dirs:
        cmd += ["--remount-ro", str(h)]
    # Private things inside a writable root are covered again on top of the bind; private
    # files elsewhere (the .env next to config.toml) are covered by an empty file.
    for p in protected_paths(cfg):
        inside_writable = any(p.is_relative_to(w) for w in writable)
        if inside_writable and p not in writable and p.is_dir():
            cmd += ["--tmpfs", str(p), "--remount-ro", str(p)]
        elif p.is_file() and (inside_writable or not any(p.is_relative_to(h) for h in hidden_dirs)):
            cmd += ["--ro-bind", "/dev/null", str(p)]
    cmd += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if not cfg.tools.network:
        cmd += ["--unshare-net"]
    # Run as root (not advised), bwrap would keep every capability: mount could undo all this.
    cmd += ["--cap-drop", "ALL", "--die-with-parent", "--new-session", "--clearenv"]
    for key, value in (env if env is not None else tool_env(cfg)).items():
        cmd += ["--setenv", key, value]
    cmd += ["--chdir", str(cwd), "--", *argv]
    return cmd


def sandbox_status(cfg: Config, *, probe: bool = True) -> SandboxStatus:
    """``(True, detail)`` when bash will run inside bubblewrap; else ``(False, why and fix)``.

    Without ``probe`` only the config and the presence of ``bwrap`` are checked.
    """
    if not cfg.tools.sandbox:
        return SandboxStatus(
            False, "sandbox disabled by tools.sandbox=false; bash asks before every command"
        )
    path = shutil.which("bwrap")
    if path is None:
        return SandboxStatus(
            False,
            "bwrap not found: install the 'bubblewrap' package; until then bash asks "
            "before every command",
        )
    if not probe:
        return SandboxStatus(True, f"bubblewrap at {path}")
    try:
        proc = subprocess.run(
            [
                "bwrap",
                "--ro-bind",
                "/",
                "/",
                "--dev",
                "/dev",
                "--proc",
                "/proc",
                "--unshare-pid",
                "--unshare-net",
                "--die-with-parent",
                "--",
                "true",
            ],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return SandboxStatus(False, f"bwrap failed to start ({e}); bash asks before every command")
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip()[:200]
        return SandboxStatus(
            False,
            f"bwrap cannot create namespaces here ({err}); enable unprivileged user "
            "namespaces or run as a user that may; bash asks before every command",
        )
    return _probe_interpreter(path)


def _probe_interpreter(path: str) -> SandboxStatus:
    """The limits wrapper runs on Luna's interpreter: it must be visible inside the sandbox."""
    covering = ["--tmpfs", "/tmp", "--tmpfs", "/run", "--dev", "/dev", "--proc", "/proc"]
    argv = ["bwrap", "--ro-bind", "/", "/", *covering, "--unshare-pid", "--die-with-parent"]
    try:
        proc = subprocess.run(
            [*argv, "--", INTERPRETER, "-I", "-S", "-c", ""],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return SandboxStatus(False, f"bwrap failed to start ({e}); bash asks before every command")
    if proc.returncode != 0:
        return SandboxStatus(
            False,
            f"Luna's Python ({INTERPRETER}) cannot run inside the sandbox, which hides /tmp, "
            "/run and /dev: install Luna elsewhere; bash asks before every command",
        )
    return SandboxStatus(True, f"bubblewrap at {path} (namespaces work)")
