"""Test stand-ins: the scripted OpenAI-compatible LLM server (the only allowed fake)."""

from tests.fakes.llm_server import FakeLLMServer, Reply

__all__ = ["FakeLLMServer", "Reply"]
