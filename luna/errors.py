"""The exceptions Luna raises.

Everything Luna raises on purpose derives from LunaError, so a front-end can show one short
line for any of them and log the traceback for the operator::

    LunaError
    ├── ConfigError        bad config.toml / environment value (exit code 2)
    ├── LLMError           the model endpoint failed
    │   ├── LLMUnreachableError     connection refused / DNS / timeout on connect
    │   ├── LLMContextOverflowError the prompt does not fit the server's context
    │   └── LLMRejectedError        the server refused this request (a 4xx, or a 500 that
    │                               retrying cannot fix: e.g. a history its template rejects)
    ├── ToolError          a tool could not run (shown to the model as a result)
    ├── MCPError           an MCP server could not start or answer
    ├── MemoryStoreError   the database or embedding model failed
    │   ├── DatabaseBusyError     another program held the write lock past the wait
    │   ├── DatabaseCorruptError  the file is damaged or not a database: Luna stops writing
    │   ├── DatabaseMissingError  the database is gone (or empty) where one existed
    │   ├── SessionInUseError     a session to forget has a turn running or messages held
    │   └── NoSuchSessionError    no session has that id
    ├── DataFolderInUseError  another Luna process runs on this data folder
    ├── ScheduleError      a scheduler request that cannot be done (a bad time, no right)
    │   └── NoSuchTaskError    no task with that id (or none the asker may see)
    ├── SkillError         a skill that cannot be installed, saved, found or changed
    └── AttachmentError    a file sent with a message that cannot be taken (one line why)
        └── AttachmentMissingError  a stored attachment's file is gone or damaged

Dependencies' exceptions are translated once, where the dependency is owned, with
``raise ... from``.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class LunaError(Exception):
    """Base of every error Luna raises deliberately."""


class ConfigError(LunaError):
    """The configuration is invalid; the message names the key and what to do."""


class UsageError(LunaError):
    """A command was given bad input (an argument, a file it cannot use): exit code 2, one
    line ``luna <command>: message`` (``luna.__main__`` adds the prefix)."""


class LLMError(LunaError):
    """The LLM endpoint failed (HTTP error, bad response, timeout)."""


class LLMUnreachableError(LLMError):
    """The LLM endpoint could not be reached at all."""


class LLMContextOverflowError(LLMError):
    """The prompt does not fit the server's context (``exceed_context_size_error``)."""

    def __init__(self, message: str, *, n_prompt_tokens: int | None, n_ctx: int | None) -> None:
        super().__init__(message)
        self.n_prompt_tokens = n_prompt_tokens
        self.n_ctx = n_ctx


class LLMRejectedError(LLMError):
    """The server refused the request as it is; sending it again unchanged would fail again."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class ToolError(LunaError):
    """A tool failed; the message is written for the model to read."""


class MCPError(LunaError):
    """An MCP server failed to start, crashed or timed out."""


class MatrixError(LunaError):
    """The Matrix homeserver failed or refused a request (``luna.frontends.matrix``)."""


class MemoryStoreError(LunaError):
    """The session log / memory database or the embedding model failed."""


class DatabaseBusyError(MemoryStoreError):
    """Another program held the database's write lock for longer than Luna waits."""


class DatabaseCorruptError(MemoryStoreError):
    """The database file is damaged (a bad page) or not a database; nothing more is written."""


class DatabaseMissingError(MemoryStoreError):
    """The database is missing or empty although the data folder shows one existed."""


class SessionInUseError(MemoryStoreError):
    """A session cannot be forgotten now: a turn of it is running, or messages of it wait to
    be written; the message says what to wait for."""


class NoSuchSessionError(MemoryStoreError):
    """No session (no message, summary or memory) has this id."""


class DataFolderInUseError(LunaError):
    """Another Luna process (daemon, REPL or web) runs on this data folder."""

    def __init__(self, message: str, *, pid: int | None) -> None:
        super().__init__(message)
        self.pid = pid


class ScheduleError(LunaError):
    """A scheduler request that cannot be done (a bad time, no right, no such task): its
    message is one line for the person who asked, or for the model as a tool result."""


class NoSuchTaskError(ScheduleError):
    """No task with that id (or none the asker may see). The message names the model's
    ``list_tasks``; the CLI says ``luna schedule list`` instead."""

    def __init__(self, task_id: object) -> None:
        super().__init__(f"there is no task #{task_id} (see list_tasks)")
        self.task_id = task_id


class SkillError(LunaError):
    """A skill that cannot be installed, saved, found or changed; the message says why."""


class AttachmentError(LunaError):
    """A file sent with a message cannot be taken or read: the message is one short line for
    the user (too big, not an image, damaged...), the rest of the message goes on."""


class AttachmentMissingError(AttachmentError):
    """A stored attachment's file is gone, or its bytes no longer match its hash."""


def did_you_mean(word: str, choices: Iterable[str], *, n: int = 1, cutoff: float = 0.6) -> str:
    """``" (did you mean 'x'?)"`` for the closest of ``choices``, or ``""`` when none is close.

    The one place Luna phrases a suggestion, for config keys, tool names and MCP entries alike.
    """
    close = difflib.get_close_matches(word, list(choices), n=n, cutoff=cutoff)
    if not close:
        return ""
    return " (did you mean " + ", ".join(f"'{c}'" for c in close) + "?)"
