"""The model side: the OpenAI-compatible client, markup recovery and the embedded demo model.

May import ``luna.config``, ``luna.errors``, ``luna.messages`` and ``luna.observe``; never the
agent, memory, tools or a front-end.
"""

from luna.llm.client import LLMClient, normalize_messages

__all__ = ["LLMClient", "normalize_messages"]
