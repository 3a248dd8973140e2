"""How an OpenAI client's request maps onto Luna's own session log.

Luna keeps the history; an OpenAI client resends its whole conversation with every request.

**Which session.** ``X-Luna-Session: <id>`` names the session verbatim (any owner session: a
page or REPL session can be continued from an API client). Otherwise the ``user`` field names
it as ``api:<user>``; with neither, the session is ``api:default``.

**Images.** The last message's ``image_url`` parts are its files (``image_urls``); in the
client's earlier messages only the text is compared.

**Which messages.** Only the client's *last* message is new, and it must be a user message.
Everything before it is the client's copy of the conversation, compared (never logged) with
the tail of the session log: user messages and Luna's final replies, text trimmed, system and
tool messages ignored (Luna has its own system prompt and ran its own tools). Then:

- ``continued``: the client's earlier messages are the log's tail (or there are none): the last
  message is logged and answered as a new turn. Nothing is ever logged twice.
- ``replayed``: the client's whole conversation, its last user message included, is already
  in the log and answered (a retry after a dropped connection): the stored reply is returned
  and no turn runs. A single-message request is always ``continued``: one line alone cannot
  tell a retry from the same words said again.
- ``diverged``: the client's history differs from the log (edited, or another front-end spoke
  in between): the log wins; the last message is answered as a new turn in the session's own
  context, and the response says ``X-Luna-History: diverged``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

DEFAULT_SESSION = "api:default"
MAX_COMPARED = 400  # the client's messages compared against the log, at most (newest kept)

Outcome = Literal["continued", "replayed", "diverged"]


class RequestError(ValueError):
    """The request cannot be a turn; the message says why (HTTP 400)."""


@dataclass(frozen=True)
class Reconciled:
    outcome: Outcome
    text: str  # the new user message
    reply: str | None = None  # the stored reply, when replayed


def session_for(header: str | None, user: Any) -> str:
    """The session id a request names (see the module docstring)."""
    if header and header.strip():
        return header.strip()
    if isinstance(user, str) and user.strip():
        return f"api:{user.strip()}"
    return DEFAULT_SESSION


def content_text(content: Any) -> str:
    """A message's text: the string, or its text parts joined by newlines."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                parts.append(str(part.get("text") or ""))
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    raise RequestError("message content must be a string or a list of text parts")


def image_urls(content: Any) -> list[str]:
    """The URLs of a message's ``image_url`` parts (``data:`` or ``http(s)``), in order."""
    if not isinstance(content, list):
        return []
    urls = []
    for part in content:
        if isinstance(part, dict) and part.get("type") == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            if not isinstance(url, str) or not url:
                raise RequestError("an image_url part needs a 'url' string")
            urls.append(url)
    return urls


def conversation(messages: Any) -> list[tuple[str, str]]:
    """The client's user and assistant messages as (role, text), checked."""
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty array")
    out: list[tuple[str, str]] = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise RequestError(f"messages[{i}] must be an object with a 'role'")
        role = m["role"]
        if role not in ("system", "developer", "user", "assistant", "tool", "function"):
            raise RequestError(f"messages[{i}] has an unknown role {role!r}")
        if role not in ("user", "assistant"):
            continue
        text = content_text(m.get("content"))
        if role == "assistant" and not text.strip():
            continue  # a tool-calling step of the client's own
        out.append((role, text))
    if not out or out[-1][0] != "user" or messages[-1].get("role") != "user":
        raise RequestError("the last message must be the user's new message")
    if not out[-1][1].strip() and not image_urls(messages[-1].get("content")):
        raise RequestError("the last user message is empty")
    return out


def _same(a: list[tuple[str, str]], b: list[tuple[str, str]]) -> bool:
    return len(a) == len(b) and all(
        ra == rb and ta.strip() == tb.strip() for (ra, ta), (rb, tb) in zip(a, b, strict=True)
    )


def reconcile(client: list[tuple[str, str]], log_tail: list[tuple[str, str]]) -> Reconciled:
    """Decide what the request means (see the module docstring); ``log_tail`` is the session's
    last ``len(client) + 1`` (or fewer) user messages and final replies, oldest first."""
    client = client[-MAX_COMPARED:]
    text = client[-1][1]
    if len(client) >= 2 and len(log_tail) > len(client):
        answered = log_tail[-(len(client) + 1) :]
        if answered[-1][0] == "assistant" and _same(answered[:-1], client):
            return Reconciled("replayed", text, answered[-1][1])
    before = client[:-1]
    if not before or _same(log_tail[-len(before) :], before):
        return Reconciled("continued", text)
    return Reconciled("diverged", text)
