"""Webhook settings: the ``[hooks.NAME]`` tables of config.toml, one frozen model per hook.

A hook is a door for one outside program (a Home Assistant automation, a cron job): it signs
its events with the hook's secret, and each event becomes a turn whose prompt is ``prompt``
with the event's JSON in place of ``{body}`` (``luna.hooks``).

Invariants:
- A hook's name is 1-40 letters, digits, ``_`` and ``-``: it is a URL path segment
  (``POST /hooks/NAME``) and part of the secret's environment variable name.
- The secret comes from the environment only: the variable ``secret_env`` names, by default
  ``LUNA_HOOK_<NAME>_SECRET`` (:func:`secret_var`); a ``secret`` key in the file is refused by
  the loader. Two hooks never read the same variable.
- ``prompt`` holds ``{body}`` at least once; ``session`` is a session id (empty: ``hook-NAME``).
- ``deliver_to`` is ``"owner"`` (where the owner hears from Luna), a front-end's name, or a
  table ``{ frontend = "discord", channel_id = "…" }``; ``luna.hooks.target`` resolves it.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, field_validator

from luna.config.section import Section

NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,40}")  # fullmatch
SESSION_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")  # the web's session id rule
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
BODY = "{body}"
DEFAULT_PROMPT = (
    "An event arrived from another program. Tell me in a few lines what happened and whether "
    "I need to do anything; if nothing needs my attention, answer exactly: nothing to report"
    "\n\n{body}"
)
DEFAULT_PER_MINUTE = 10
DEFAULT_MAX_BODY_BYTES = 64 * 1024
DEFAULT_REPLAY_WINDOW = 300.0

Address = str | int | bool


class HookConfig(Section):
    """One ``[hooks.NAME]`` table; ``secret`` is filled from the environment by the loader."""

    prompt: Annotated[str, Field(min_length=1, max_length=20_000)] = DEFAULT_PROMPT
    session: str = ""  # empty: hook-NAME
    deliver_to: str | dict[str, Address] = "owner"
    tools: bool = True  # the turn may run tools ("ask" ones are denied: nobody can approve)
    per_minute: Annotated[int, Field(ge=1, le=600)] = DEFAULT_PER_MINUTE
    max_body_bytes: Annotated[int, Field(ge=256, le=1_048_576)] = DEFAULT_MAX_BODY_BYTES
    replay_window: Annotated[float, Field(ge=30, le=3600)] = DEFAULT_REPLAY_WINDOW
    secret_env: str = ""  # empty: LUNA_HOOK_<NAME>_SECRET
    secret: str = Field("", repr=False)

    @field_validator("prompt")
    @classmethod
    def _has_body(cls, value: str) -> str:
        if BODY not in value:
            raise ValueError("must contain {body}, where the event's JSON goes")
        return value

    @field_validator("session")
    @classmethod
    def _session(cls, value: str) -> str:
        if value and not SESSION_RE.fullmatch(value):
            raise ValueError(
                "must be 1-128 letters, digits and . _ : @ - starting with a letter or digit"
            )
        return value

    @field_validator("secret_env")
    @classmethod
    def _env_name(cls, value: str) -> str:
        if value and not ENV_NAME_RE.fullmatch(value):
            raise ValueError("must be an environment variable name like MY_HOOK_SECRET")
        return value

    @field_validator("deliver_to", mode="before")
    @classmethod
    def _target(cls, value: object) -> object:
        if isinstance(value, dict):
            if not isinstance(value.get("frontend"), str):
                raise ValueError('as a table must name its frontend, like { frontend = "discord" }')
            if not all(isinstance(v, str | int | bool) for v in value.values()):
                raise ValueError("as a table holds only text, numbers and true/false")
            return value
        if not isinstance(value, str) or not value.strip():
            raise ValueError(
                'must be "owner", a front-end\'s name ("web", "repl", "discord", "telegram", '
                '"matrix") or a table like { frontend = "discord", channel_id = "123" }'
            )
        return value


def secret_var(name: str, hook: HookConfig) -> str:
    """The environment variable holding hook ``name``'s secret."""
    return hook.secret_env or f"LUNA_HOOK_{name.upper().replace('-', '_')}_SECRET"


def session_of(name: str, hook: HookConfig) -> str:
    """The session the hook's turns run in."""
    return hook.session or f"hook-{name}"
