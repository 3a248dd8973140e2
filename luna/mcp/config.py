"""Parse and validate ``mcp_servers.json``; adapt MCP tool names and schemas for the model.

File format (``{"servers": {...}}``; the Claude-Desktop spelling ``"mcpServers"`` is accepted)::

    {"servers": {
        "time":    {"command": "python", "args": ["-m", "mcp_server_time"]},
        "browser": {"command": "npx", "args": ["-y", "@playwright/mcp"], "expose": "catalog",
                    "enabled": false},
        "remote":  {"transport": "http", "url": "https://example.org/mcp",
                    "headers": {"Authorization": "Bearer ${REMOTE_TOKEN}"}}
    }}

Per server: ``command``, ``args``, ``env``, ``cwd`` (stdio); ``url``, ``headers`` (http);
``transport`` (``stdio`` | ``http``, default ``http`` when only ``url`` is given), ``enabled``
(default true), ``timeout`` (seconds per call, default ``mcp.call_timeout``), ``expose``
(``direct`` | ``catalog``, default ``direct``), ``permission`` (``allow`` | ``ask`` | ``deny``,
default ``allow``: the owner chose to install the server; ``tools.permissions`` still overrides
per tool name) and ``description`` (free text, ignored).

Invariants:
- ``"command": "python"`` (or ``python3``) means Luna's own interpreter, so a server installed
  into Luna's virtualenv (``pip install mcp-server-time``) runs without PATH tricks.
- ``${VAR}`` in ``env`` values, ``args``, ``cwd``, ``url`` and ``headers`` is expanded from the
  environment mapping the caller passes; an unset variable makes that server invalid (it is not
  silently replaced by an empty string).
- A server process receives only the variables named in its ``env`` on top of a small
  non-secret base (``BASE_ENV_VARS``: PATH, HOME, LANG, LC_ALL, TZ, LOGNAME, SHELL, TERM, USER).
  Secrets such as DISCORD_TOKEN or LLM_API_KEY reach a server only when its ``env`` names them.
- A bad entry yields a ServerSpec with ``error`` set (reported by server name and skipped); one
  bad entry never hides the others. Error messages never echo env or header values.
- Server names match ``[A-Za-z0-9-]`` plus single inner underscores (no ``__``, no leading or
  trailing ``_``, at most 32 characters), so ``<server>__`` is an unambiguous tool-name prefix.
- Qualified tool names match ``^[a-zA-Z0-9_-]{1,64}$``; the mapping from a server's tool list
  to names depends only on that list (tools are processed sorted by their original name).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from luna.config import PermissionLevel
from luna.errors import ConfigError, did_you_mean

if TYPE_CHECKING:  # prelaunch imports this module early: the type only
    from luna.tools.registry import Expose

BASE_ENV_VARS = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "LOGNAME", "SHELL", "TERM", "USER")
DEFAULT_PERMISSION: PermissionLevel = "allow"
MAX_NAME = 64
MAX_SERVER_NAME = 32
MAX_DESCRIPTION = 1024

_SERVER_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]|_(?!_))*(?<!_)")  # fullmatch only
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_BAD_CHARS = re.compile(r"[^a-zA-Z0-9_-]")


@dataclass(frozen=True)
class ServerSpec:
    """One validated entry of mcp_servers.json (``error`` set when it is invalid)."""

    name: str
    transport: str = "stdio"
    command: str = ""
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # expanded, only the named variables
    cwd: Path | None = None
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    enabled: bool = True
    timeout: float = 60.0
    expose: Expose = "direct"
    permission: PermissionLevel = DEFAULT_PERMISSION
    error: str | None = None


@dataclass(frozen=True)
class ServersFile:
    """The parsed file: specs in file order, plus a file-level error (unreadable / bad JSON)."""

    path: Path
    servers: list[ServerSpec]
    error: str | None = None


def load_servers(
    path: Path, environ: Mapping[str, str], *, call_timeout: float = 60.0
) -> ServersFile:
    """Read and validate the servers file. Never raises for bad content; a missing file is empty.

    Blocking file I/O: call it through ``asyncio.to_thread`` from async code.
    """
    if not path.exists():
        return ServersFile(path, [])
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        return ServersFile(path, [], f"{path}: cannot read: {e}")
    except json.JSONDecodeError as e:
        return ServersFile(path, [], f"{path}: not valid JSON: {e}")
    return parse_servers(data, environ, path=path, call_timeout=call_timeout)


def parse_servers(
    data: Any, environ: Mapping[str, str], *, path: Path, call_timeout: float = 60.0
) -> ServersFile:
    """Validate an already-decoded servers document."""
    if not isinstance(data, dict):
        return ServersFile(path, [], f"{path}: the top level must be an object with 'servers'")
    table = data.get("servers", data.get("mcpServers", {}))
    if not isinstance(table, dict):
        return ServersFile(path, [], f"{path}: 'servers' must be an object of name -> server")
    specs = [_parse_one(str(name), raw, environ, call_timeout) for name, raw in table.items()]
    return ServersFile(path, specs)


def _parse_one(name: str, raw: Any, environ: Mapping[str, str], call_timeout: float) -> ServerSpec:
    try:
        return _build_spec(name, raw, environ, call_timeout)
    except ConfigError as e:
        enabled = raw.get("enabled", True) if isinstance(raw, dict) else True
        return ServerSpec(name=name, enabled=enabled is not False, error=str(e))


class _Entry(BaseModel):
    """One server as written in the file, before ``${VAR}`` expansion."""

    model_config = ConfigDict(extra="forbid", strict=True)

    command: str | None = None
    args: list[str] | None = None
    env: dict[str, str] | None = None
    cwd: str | None = None
    transport: Literal["stdio", "http"] | None = None
    url: str | None = None
    headers: dict[str, str] | None = None
    enabled: bool = True
    timeout: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    expose: Literal["direct", "catalog"] = "direct"
    permission: PermissionLevel = DEFAULT_PERMISSION
    description: str = ""

    @property
    def chosen_transport(self) -> str:
        """``transport``, or http when only a ``url`` is given."""
        if self.transport:
            return self.transport
        return "http" if self.url is not None and self.command is None else "stdio"

    @model_validator(mode="after")
    def _fields_match_transport(self) -> _Entry:
        stdio_only = {"command": self.command, "args": self.args, "env": self.env,
                      "cwd": self.cwd}  # fmt: skip
        http_only = {"url": self.url, "headers": self.headers}
        if self.chosen_transport == "stdio":
            if not (self.command or "").strip():
                raise ValueError("stdio transport needs a 'command'")
            wrong = [k for k, v in http_only.items() if v is not None]
            other = "http"
        else:
            if not (self.url or "").startswith(("http://", "https://", "${")):
                raise ValueError("http transport needs a 'url' starting with http:// or https://")
            wrong = [k for k, v in stdio_only.items() if v is not None]
            other = "stdio"
        if wrong:
            raise ValueError(f"{wrong[0]!r} only applies to the {other} transport")
        return self


_TYPE_WORDS = {
    "string_type": "a string",
    "bool_type": "true or false",
    "float_type": "a number",
    "list_type": "a list of strings",
    "dict_type": "an object of strings",
}


def _one_line(error: ValidationError) -> str:
    """The first validation problem as one line; env and header values are never echoed."""
    first = error.errors(include_url=False)[0]
    loc = [str(part) for part in first["loc"]]
    key = loc[0] if loc else ""
    kind = first["type"]
    if kind == "extra_forbidden":
        return f"unknown key {key!r}{did_you_mean(key, _Entry.model_fields)}"
    if kind == "literal_error":
        return f"{key} must be one of {first['ctx']['expected']}"
    if key == "timeout":
        return "timeout must be a positive number of seconds"
    if kind in _TYPE_WORDS:
        if len(loc) == 1:
            return f"{key} must be {_TYPE_WORDS[kind]}"
        item = f"[{loc[1]}]" if key == "args" else f".{loc[1]}"
        return f"{key}{item} must be a string"
    return str(first["msg"]).removeprefix("Value error, ")


def _build_spec(name: str, raw: Any, environ: Mapping[str, str], call_timeout: float) -> ServerSpec:
    if not _SERVER_NAME.fullmatch(name) or len(name) > MAX_SERVER_NAME:
        raise ConfigError(
            f"server name {name!r} must use letters, digits, '-' and single inner '_' "
            f"(at most {MAX_SERVER_NAME} characters)"
        )
    if not isinstance(raw, dict):
        raise ConfigError("must be an object")
    try:
        entry = _Entry.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(_one_line(e)) from None
    common = ServerSpec(
        name=name,
        transport=entry.chosen_transport,
        enabled=entry.enabled,
        timeout=float(entry.timeout if entry.timeout is not None else call_timeout),
        expose=entry.expose,
        permission=entry.permission,
    )
    if entry.chosen_transport == "http":
        url = _expand(entry.url or "", environ, "url")
        if not url.startswith(("http://", "https://")):
            raise ConfigError("http transport needs a 'url' starting with http:// or https://")
        headers = entry.headers or {}
        return dataclasses.replace(
            common,
            url=url,
            headers={k: _expand(v, environ, f"headers.{k}") for k, v in headers.items()},
        )
    command = _expand(entry.command or "", environ, "command")
    cwd = _expand(entry.cwd, environ, "cwd") if entry.cwd else ""
    return dataclasses.replace(
        common,
        command=sys.executable if command in ("python", "python3") else command,
        args=[_expand(a, environ, f"args[{i}]") for i, a in enumerate(entry.args or [])],
        env={k: _expand(v, environ, f"env.{k}") for k, v in (entry.env or {}).items()},
        cwd=Path(cwd).expanduser() if cwd else None,
    )


def _expand(text: str, environ: Mapping[str, str], where: str) -> str:
    def sub(m: re.Match[str]) -> str:
        var = m.group(1)
        if var not in environ:
            raise ConfigError(f"{where}: environment variable {var} is not set")
        return environ[var]

    return _VAR.sub(sub, text)


def server_env(spec: ServerSpec, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment for a stdio server: the non-secret base plus the server's own ``env``."""
    base = {k: environ[k] for k in BASE_ENV_VARS if k in environ}
    return base | spec.env


# ---- names and schemas ----------------------------------------------------------------------


def qualify_names(server: str, tool_names: Iterable[str]) -> dict[str, str]:
    """Map each original tool name to a unique ``<server>__<tool>`` function name.

    Invalid characters become ``_``; a name too long for 64 characters is cut and given a short
    hash of the original; a remaining clash gets ``_2``, ``_3``... in sorted original-name order.
    """
    prefix = f"{server}__"
    room = MAX_NAME - len(prefix)
    taken: set[str] = set()
    result: dict[str, str] = {}
    for original in sorted(set(tool_names)):
        base = _BAD_CHARS.sub("_", original) or "tool"
        if len(base) > room:
            digest = hashlib.sha1(original.encode()).hexdigest()[:6]
            base = f"{base[: room - 7]}_{digest}"
        candidate, n = base, 2
        while candidate in taken:
            suffix = f"_{n}"
            candidate = f"{base[: room - len(suffix)]}{suffix}"
            n += 1
        taken.add(candidate)
        result[original] = prefix + candidate
    return result


def to_parameters(input_schema: Any) -> dict[str, Any]:
    """Turn an MCP tool's JSON-Schema ``inputSchema`` into function-calling ``parameters``."""
    schema = dict(input_schema) if isinstance(input_schema, dict) else {}
    schema.pop("$schema", None)
    schema.pop("title", None)
    schema["type"] = "object"
    props = schema.get("properties")
    schema["properties"] = props if isinstance(props, dict) else {}
    required = schema.get("required")
    if required is not None and not (
        isinstance(required, list) and all(isinstance(r, str) for r in required)
    ):
        schema.pop("required")
    return schema


def tool_description(server: str, name: str, description: str | None, title: str | None) -> str:
    """A short description for the model, naming the server the tool comes from."""
    text = (description or title or f"The '{name}' tool").strip()
    if len(text) > MAX_DESCRIPTION:
        text = text[: MAX_DESCRIPTION - 1].rstrip() + "…"
    return f"{text} (MCP server '{server}')"
