"""Luna's Qwen3.5 template renders exactly what the stock one does, unless it may keep thinking.

Both templates run in the real llama-server; every case is rendered by both (/apply-template).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.real_llama import RealLlama

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a command.",
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string"},
                    "verbose": {"type": "boolean"},
                    "n": {"type": "integer"},
                    "opts": {"type": "object"},
                },
                "required": ["command"],
            },
        },
    }
]


def call(i: int, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"c{i}",
        "type": "function",
        "function": {"name": "bash", "arguments": json.dumps(args)},
    }


TOOL_LOOP = [
    {"role": "system", "content": "S"},
    {"role": "user", "content": "list"},
    {
        "role": "assistant",
        "content": "",
        "reasoning_content": "I will list.",
        "tool_calls": [
            call(1, {"command": "ls -la", "verbose": True, "n": 3, "opts": {"a": [1, 2]}}),
            call(2, {"command": "pwd"}),
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "a\nb"},
    {"role": "tool", "tool_call_id": "c2", "content": "/x"},
    {"role": "assistant", "content": "Done: two files.", "reasoning_content": "ok"},
    {"role": "user", "content": "thanks"},
    {"role": "assistant", "content": "Let me check.", "tool_calls": [call(3, {"command": "date"})]},
    {"role": "tool", "tool_call_id": "c3", "content": "Mon"},
]
CASES = {
    "plain": [{"role": "user", "content": "hi"}],
    "system": [{"role": "system", "content": "  Be brief.  "}, {"role": "user", "content": " hi "}],
    "empty system": [{"role": "system", "content": ""}, {"role": "user", "content": "hi"}],
    "history": [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b", "reasoning_content": "think b"},
        {"role": "user", "content": "c"},
    ],
    "think in content": [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "<think>\nold\n</think>\n\nanswer"},
        {"role": "user", "content": "c"},
    ],
    "tool loop": TOOL_LOOP,
    "text parts": [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    ],
    "tool_response user": [
        {"role": "user", "content": "real q"},
        {"role": "user", "content": "<tool_response>x</tool_response>"},
    ],
    "null and float": [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [call(1, {"command": "x", "verbose": None, "n": 1.5})],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
    ],
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("with_tools", [False, True])
@pytest.mark.parametrize("thinking", [True, False])
def test_template_matches_stock_when_reasoning_is_not_preserved(
    real_llama: Callable[..., RealLlama], name: str, with_tools: bool, thinking: bool
) -> None:
    kwargs = {"chat_template_kwargs": {"preserve_reasoning": False, "enable_thinking": thinking}}
    tools = TOOLS if with_tools else None
    stock = real_llama("stock").render(CASES[name], tools, **kwargs)
    assert real_llama("luna").render(CASES[name], tools, **kwargs) == stock


def test_template_preserving_keeps_every_turns_reasoning_and_json_booleans(
    real_llama: Callable[..., RealLlama],
) -> None:
    kwargs = {"chat_template_kwargs": {"preserve_reasoning": True}}
    stock = real_llama("stock").render(TOOL_LOOP, TOOLS, **kwargs)
    luna = real_llama("luna").render(TOOL_LOOP, TOOLS, **kwargs)
    assert "I will list." not in stock  # the stock template drops it before "thanks"
    assert "<think>\nI will list.\n</think>" in luna and "<think>\nok\n</think>" in luna
    assert "<parameter=verbose>\nTrue\n" in stock and "<parameter=verbose>\ntrue\n" in luna
    # The server sees that Luna's template can keep reasoning, and keeps it by default.
    assert real_llama("luna").props()["chat_template_caps"]["supports_preserve_reasoning"]
    assert not real_llama("stock").props()["chat_template_caps"]["supports_preserve_reasoning"]
