"""The chat model as the rest of Luna calls it: ``ChatModel``, the one seam above ``llm/``.

``LLMClient`` (one server) and ``RoleLLM`` (a role routed over ``[[llm.servers]]``) both keep
it; the agent, its sub-agents, the librarian, the image describer and tools' own model calls
(``ToolContext.llm``) hold a ``ChatModel`` and nothing more.

Invariants:
- ``chat``/``stream``/``render`` raise only ``LLMError`` subclasses (``LLMUnreachableError``,
  ``LLMContextOverflowError``, ``LLMRejectedError``), each one line naming the URL and the fix.
- ``lane`` is the session a request serves (its KV-cache slot is kept for it); None means
  background work.
- ``server_info`` and ``can_see`` never raise: None / False when the server cannot say.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from luna.messages import LLMResponse

if TYPE_CHECKING:
    from luna.errors import LLMError
    from luna.llm.server_info import ServerInfo
    from luna.llm.stream import Progress

Messages = list[dict[str, Any]]  # OpenAI chat messages, as Luna builds them (wire data)
ToolSpecs = list[dict[str, Any]]  # OpenAI tool specs (wire data)
TextCallback = Callable[[str], Awaitable[None]]
ProgressCallback = Callable[["Progress"], Awaitable[None]]
# Told the exact JSON body of each request and what came of it (the request log).
RequestRecorder = Callable[
    [dict[str, Any], "LLMResponse | None", "LLMError | None"], Awaitable[None]
]


class ChatModel(Protocol):
    """What the agent, sub-agents, the librarian and tools call on the model."""

    async def chat(
        self,
        messages: Messages,
        tools: ToolSpecs | None = None,
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        response_format: dict[str, Any] | None = None,
        tool_choice: str | None = None,
        on_status: TextCallback | None = None,
        record: RequestRecorder | None = None,
        lane: str | None = None,
    ) -> LLMResponse:
        """One completion, returned whole."""
        ...

    async def stream(
        self,
        messages: Messages,
        tools: ToolSpecs | None = None,
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        on_text: TextCallback | None = None,
        on_reasoning: TextCallback | None = None,
        on_progress: ProgressCallback | None = None,
        on_status: TextCallback | None = None,
        response_format: dict[str, Any] | None = None,
        tool_choice: str | None = None,
        record: RequestRecorder | None = None,
        lane: str | None = None,
    ) -> LLMResponse:
        """One completion; text, reasoning and prompt progress go to the callbacks as they come."""
        ...

    async def render(self, messages: Messages, tools: ToolSpecs | None = None) -> str:
        """The prompt text the server makes of ``messages`` (llama-server's /apply-template)."""
        ...

    async def server_info(
        self, *, refresh: bool = False, lane: str | None = None
    ) -> ServerInfo | None:
        """llama-server's ``/props`` facts for the server ``lane`` goes to; None elsewhere."""
        ...

    async def can_see(self, lane: str | None = None) -> bool:
        """Whether the server ``lane``'s next call goes to takes images."""
        ...

    async def leaves_sessions_alone(self) -> bool:
        """Whether a background call (no lane) cannot cost a session its KV cache: it goes to
        a server no chat session uses, or to a llama-server slot of its own."""
        ...
