"""One turn of the agent: the loop, the prompt laid out for the KV cache, sub-agents.

May import ``llm``, ``memory``, ``tools``, ``config``, ``messages``, ``errors`` and
``observe``; never a front-end.
"""

from luna.agent.loop import Agent

__all__ = ["Agent"]
