"""Load the configuration once: config.toml plus environment overrides, validated by the schema.

Invariants:
- This is the only module that reads ``os.environ`` for settings (``NO_COLOR`` included: it
  becomes ``Config.no_color``).
- Secrets (``discord.token``, ``telegram.token``, ``llm.api_key``, ``web.token``,
  ``matrix.access_token``, ``matrix.password``, the embedding endpoint's key named by
  ``memory.embedding_endpoint_key_env``) come from the environment only; a config file that
  sets one is refused with a message saying which variable to set instead.
- Relative paths resolve against the folder of the config file (or the current folder when
  there is none), so ``data/luna.db`` means the same thing wherever Luna is started from.
- ``memory.model_cache`` left unset is the machine's cache of prepared embedding models,
  ``$LUNA_CACHE_DIR/luna``, ``$XDG_CACHE_HOME/luna`` or ``$HOME/.cache/luna`` (the root
  ``.ci/llama_server.py`` and ``.ci/install`` use) plus ``embedding-models``; with none of these
  variables set, None (each data folder keeps its own).
- Every validation error becomes one ConfigError line naming the key path, what is allowed
  (the range, for numbers) and, for unknown names, the closest known one. Secret values are
  never echoed.
"""

from __future__ import annotations

import os
import tomllib
import typing
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from luna.config.hooks import NAME_RE, HookConfig, secret_var
from luna.config.schema import SECRET_KEYS, SECTIONS, Config
from luna.config.section import Section
from luna.errors import ConfigError, did_you_mean

# Environment variable -> key path it overrides.
ENV_OVERRIDES = {
    "DISCORD_TOKEN": "discord.token",
    "TELEGRAM_TOKEN": "telegram.token",
    "LLM_ENDPOINT": "llm.endpoint",
    "LLM_MODEL": "llm.model",
    "LLM_API_KEY": "llm.api_key",
    "MEMORY_DB_PATH": "memory.db_path",
    "LOG_DIR": "observe.log_dir",
    "LUNA_WORKSPACE": "agent.workspace",
    "LUNA_MCP_SERVERS": "mcp.servers_file",
    "LUNA_OUTPUTS_DIR": "tools.outputs_dir",
    "LUNA_WEB_TOKEN": "web.token",
    "MATRIX_ACCESS_TOKEN": "matrix.access_token",
    "MATRIX_PASSWORD": "matrix.password",
}


def _model(section: str) -> type[Section]:
    """The model of a section: a SECTIONS entry, or a hook's table (``hooks.NAME``)."""
    return HookConfig if section.startswith("hooks.") else SECTIONS[section]


def field_types(section: str) -> dict[str, Any]:
    """The annotation of every key in a section."""
    return {name: f.annotation for name, f in _model(section).model_fields.items()}


def bounds_of(section: str, key: str) -> str:
    """The allowed range of a numeric key as text (``"1 ≤ x ≤ 86400"``), or ``""``."""
    field = _model(section).model_fields.get(key)
    low = high = ""
    for item in field.metadata if field is not None else []:
        if (v := getattr(item, "ge", None)) is not None:
            low = f"{v:g} ≤ "
        if (v := getattr(item, "gt", None)) is not None:
            low = f"{v:g} < "
        if (v := getattr(item, "le", None)) is not None:
            high = f" ≤ {v:g}"
        if (v := getattr(item, "lt", None)) is not None:
            high = f" < {v:g}"
    return f"{low}x{high}" if low or high else ""


_PLURALS = {int: "integers", float: "numbers", bool: "true/false values", str: "strings"}


def _type_name(tp: Any) -> str:
    """What a value of ``tp`` is, with its article: "an integer", "a list of strings"."""
    origin = typing.get_origin(tp)
    if origin is list:
        item = typing.get_args(tp)[0]
        if item is Path:
            return "a list of paths"
        return f"a list of {_PLURALS.get(item) or 'items: ' + _type_name(item)}"
    if origin is dict:
        return 'a table, like {"name": "value"}'
    if origin is typing.Literal:
        return "one of " + ", ".join(str(a) for a in typing.get_args(tp))
    names = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
    if tp is Path:
        return "a path"
    return names.get(tp, getattr(tp, "__name__", str(tp)))


def _key_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _describe(error: ErrorDetails, env_sources: dict[str, str]) -> str:
    """One line for the first validation error."""
    loc = tuple(error["loc"])
    kind = error["type"]
    if kind == "extra_forbidden":
        if len(loc) == 1:
            return f"unknown section [{loc[0]}]{did_you_mean(str(loc[0]), SECTIONS)}"
        section, key = str(loc[0]), str(loc[1])
        return f"unknown key {section}.{key}{did_you_mean(key, _model(section).model_fields)}"
    if not loc:  # a model-level rule (e.g. bash_timeout <= bash_max_timeout)
        return str(error["msg"]).removeprefix("Value error, ")
    if len(loc) == 1:
        if kind in ("model_type", "model_attributes_type", "dict_type"):
            return f"[{loc[0]}] must be a table of settings, not a single value"
        return str(error["msg"]).removeprefix("Value error, ")
    dotted = f"{loc[0]}.{loc[1]}"
    where = _key_path(loc) + (f" (from ${env_sources[dotted]})" if dotted in env_sources else "")
    shown = "<hidden>" if dotted in SECRET_KEYS else repr(error.get("input"))
    if kind.startswith(("greater_than", "less_than")) or kind == "finite_number":
        allowed = bounds_of(str(loc[0]), str(loc[1]))
        if kind == "finite_number":
            return f"{where} must be a finite number (allowed: {allowed}), got {shown}"
        return f"{where} is out of range (allowed: {allowed}), got {shown}"
    if kind == "value_error":
        return f"{where} {str(error['msg']).removeprefix('Value error, ')}, got {shown}"
    if kind == "literal_error":
        return f"{where} must be one of {error.get('ctx', {}).get('expected')}; got {shown}"
    tp: Any = field_types(str(loc[0])).get(str(loc[1]))
    if len(loc) > 2 and tp is not None:  # an item of a list or table
        args = typing.get_args(tp)
        tp = args[-1] if args else tp
    if kind == "string_too_short":
        return f"{where} must not be empty"
    return f"{where} must be {_type_name(tp)}, got {shown}"


MODEL_CACHE_FOLDER = "embedding-models"


def machine_model_cache(env: dict[str, str]) -> Path | None:
    """The machine-wide folder of prepared embedding models (see the module docstring)."""
    base = env.get("LUNA_CACHE_DIR") or env.get("XDG_CACHE_HOME")
    if base:
        root = Path(base) / "luna"
    elif env.get("HOME"):
        root = Path(env["HOME"]) / ".cache" / "luna"
    else:
        return None
    return root.expanduser() / MODEL_CACHE_FOLDER


def default_config_path(env: dict[str, str] | None = None) -> Path:
    """LUNA_CONFIG if set, else ./config.toml."""
    env = dict(os.environ) if env is None else env
    return Path(env.get("LUNA_CONFIG") or "config.toml")


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config: {path} is not valid TOML: {e}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config: {path} is not UTF-8 text") from None
    except OSError as e:
        raise ConfigError(f"config: cannot read {path}: {e.strerror}") from None


def load_config(path: Path | None = None, env: dict[str, str] | None = None) -> Config:
    """Load config.toml (if it exists) and apply environment overrides.

    An explicitly named file (argument or LUNA_CONFIG) must exist; the implicit ./config.toml
    may be absent, in which case the defaults apply.
    """
    env = dict(os.environ if env is None else env)
    explicit = path is not None or bool(env.get("LUNA_CONFIG"))
    path = path or default_config_path(env)
    data: dict[str, Any] = {}
    if path.exists():
        data = read_toml(path)
        base_dir = path.resolve().parent
        cfg_path: Path | None = path.resolve()
    elif explicit:
        raise ConfigError(f"config: {path} does not exist (set LUNA_CONFIG to a config.toml)")
    else:
        base_dir = Path.cwd()
        cfg_path = None
    return build_config(data, env, base_dir=base_dir, path=cfg_path)


def build_config(
    data: dict[str, Any],
    env: dict[str, str],
    *,
    base_dir: Path,
    path: Path | None = None,
) -> Config:
    """Validate a parsed TOML document plus environment into a Config."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for section, table in data.items():
        values[section] = dict(table) if isinstance(table, dict) else table
        if not isinstance(table, dict):
            continue
        for key in table:
            dotted = f"{section}.{key}"
            if dotted in SECRET_KEYS:
                raise ConfigError(
                    f"config: {dotted} is a secret; set {SECRET_KEYS[dotted]} in the "
                    "environment (or the systemd EnvironmentFile) instead of config.toml"
                )
            sources[dotted] = "file"
    _refuse_server_keys(values.get("llm"))
    hooks = _load_hooks(values.pop("hooks", {}), env)
    env_sources: dict[str, str] = {}
    for var, dotted in ENV_OVERRIDES.items():
        if env.get(var):
            section, key = dotted.split(".")
            table = values.setdefault(section, {})
            if isinstance(table, dict):
                table[key] = env[var]
            sources[dotted] = f"env {var}"
            env_sources[dotted] = var
    try:
        cfg = Config.model_validate({**values, "base_dir": base_dir, "path": path})
    except ValidationError as e:
        raise ConfigError(f"config: {_describe(e.errors()[0], env_sources)}") from None
    sections = {name: _absolute_paths(getattr(cfg, name), base_dir) for name in SECTIONS}
    sections["llm"] = _server_keys(sections["llm"], env)
    memory = sections["memory"]
    if memory.model_cache is None:
        memory = memory.model_copy(update={"model_cache": machine_model_cache(env)})
        sections["memory"] = memory
    if memory.embedding_endpoint_key_env:
        key = env.get(memory.embedding_endpoint_key_env, "")
        sections["memory"] = memory.model_copy(update={"embedding_endpoint_key": key})
    extra = tuple(env[name] for name in cfg.tools.secret_env if env.get(name))
    extra += tuple(s.api_key for s in sections["llm"].servers if s.api_key)
    if sections["memory"].embedding_endpoint_key:
        extra += (sections["memory"].embedding_endpoint_key,)
    extra += tuple(h.secret for h in hooks.values() if h.secret)
    no_color = bool(env.get("NO_COLOR"))  # present and not empty, whatever its value
    return cfg.model_copy(
        update={
            **sections,
            "hooks": hooks,
            "sources": sources,
            "extra_secrets": extra,
            "no_color": no_color,
        }
    )


def _load_hooks(raw: Any, env: dict[str, str]) -> dict[str, HookConfig]:
    """The ``[hooks.NAME]`` tables, validated, each with its secret from the environment (an
    unset secret stays empty here: ``luna doctor`` and the web front-end's start refuse it)."""
    if not isinstance(raw, dict):
        raise ConfigError("config: [hooks] must hold one table per hook, like [hooks.door]")
    hooks: dict[str, HookConfig] = {}
    readers: dict[str, str] = {}  # secret variable -> the hook reading it
    for name, table in raw.items():
        where = f"hooks.{name}"
        if not NAME_RE.fullmatch(name):
            raise ConfigError(
                f"config: [{where}]: a hook's name is 1-40 letters, digits, _ and - "
                "(it is part of the URL /hooks/NAME)"
            )
        if not isinstance(table, dict):
            raise ConfigError(f"config: [{where}] must be a table of settings (prompt = ...)")
        if "secret" in table:
            var = secret_var(name, HookConfig(secret_env=str(table.get("secret_env") or "")))
            raise ConfigError(
                f"config: {where}.secret is a secret; set {var} in the environment (or the "
                "systemd EnvironmentFile) instead of config.toml"
            )
        try:
            hook = HookConfig.model_validate(table)
        except ValidationError as e:
            first = e.errors()[0]
            first["loc"] = (where, *first["loc"])
            raise ConfigError(f"config: {_describe(first, {})}") from None
        var = secret_var(name, hook)
        if var in readers:
            raise ConfigError(
                f"config: hooks {readers[var]} and {name} would both read their secret from "
                f"{var}; give one of them its own secret_env"
            )
        readers[var] = name
        hooks[name] = hook.model_copy(update={"secret": env.get(var, "")})
    return hooks


def _refuse_server_keys(llm: Any) -> None:
    for i, server in enumerate((llm or {}).get("servers") or [] if isinstance(llm, dict) else []):
        if isinstance(server, dict) and "api_key" in server:
            raise ConfigError(
                f"config: llm.servers[{i}].api_key is a secret; put the key in an environment "
                "variable and name it with api_key_env"
            )


def _server_keys(llm: Any, env: dict[str, str]) -> Any:
    """Each ``[[llm.servers]]`` entry's key, read from the variable its ``api_key_env`` names."""
    if not llm.servers:
        return llm
    servers = [
        s.model_copy(update={"api_key": env.get(s.api_key_env, "")}) if s.api_key_env else s
        for s in llm.servers
    ]
    return llm.model_copy(update={"servers": servers})


def _absolute_paths(section: Any, base_dir: Path) -> Any:
    changes: dict[str, Any] = {}
    for name in type(section).model_fields:
        value = getattr(section, name)
        if isinstance(value, Path):
            changes[name] = _absolute(value, base_dir)
        elif isinstance(value, list) and value and isinstance(value[0], Path):
            changes[name] = [_absolute(p, base_dir) for p in value]
    return section.model_copy(update=changes) if changes else section


def _absolute(p: Path, base_dir: Path) -> Path:
    p = p.expanduser()
    return p if p.is_absolute() else (base_dir / p)


def effective_items(cfg: Config) -> list[tuple[str, Any, str]]:
    """(key path, display value, source) for every key; secrets are masked."""
    rows = []
    for section in SECTIONS:
        obj = getattr(cfg, section)
        for name in type(obj).model_fields:
            dotted = f"{section}.{name}"
            value = getattr(obj, name)
            if dotted in SECRET_KEYS:
                value = mask_secret(value)
            elif isinstance(value, Path):
                value = str(value)
            elif isinstance(value, list):
                value = [str(v) for v in value]
            rows.append((dotted, value, cfg.sources.get(dotted, "default")))
    for name, hook in cfg.hooks.items():
        for key in type(hook).model_fields:
            value = getattr(hook, key)
            source = "file"
            if key == "secret":
                value, source = mask_secret(value), f"env {secret_var(name, hook)}"
            rows.append((f"hooks.{name}.{key}", value, source))
    return rows


def mask_secret(value: str) -> str:
    """How a secret is shown: whether it is set and its length, none of its characters."""
    if not value:
        return "(not set)"
    return f"set ({len(value)} chars)"


def secret_values(cfg: Config) -> list[str]:
    """Secret strings that must never reach a log line, a tool or the model."""
    secrets = (cfg.llm.api_key, cfg.discord.token, cfg.telegram.token, cfg.web.token)
    matrix = (cfg.matrix.access_token, cfg.matrix.password)
    return [v for v in (*secrets, *matrix, *cfg.extra_secrets) if v]


def is_llm_endpoint_explicit(cfg: Config) -> bool:
    """True when the user chose a server (file or env): never silently replace it."""
    return "llm.endpoint" in cfg.sources or bool(cfg.llm.servers)
