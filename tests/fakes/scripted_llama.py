"""A scripted model on the real llama-server: scripted words, real rendering and real caching.

The tiny Gemma model cannot think or call tools the way Qwen3.5 does, so the replies are
scripted; but the server that renders each request with Qwen3.5's template, tokenizes it and
holds it in its KV cache is the real one. For each request Luna sends to the scripted server:

1. the real server renders the request (``/apply-template``) and evaluates it into its cache
   (``/completion``, ``n_predict: 0``): its ``timings`` are what this request would prefill;
2. the scripted reply is turned into the exact text the model would have generated, by letting
   the server's own template render it after the prompt, and that text is evaluated too: the
   cache now holds the prompt plus the "generated" reply, as after a real generation (which
   leaves out only the final end-of-turn token);
3. Luna gets the scripted reply with the real usage and timings.

Image parts work too (on a server with a vision projector): the rendered prompt holds one media
marker per image, and ``/completion`` gets the images' bytes with it, in order.

``Recorder`` keeps, per request, the rendered prompt, what the server held before it, and the
server's counts, for tests and ``bench/prefix_reuse.py``.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fakes.llm_server import Reply, rough_tokens
from tests.real_llama import RealLlama

END = "<|im_end|>"
GENERATION_PROMPT = "<|im_start|>assistant\n<think>\n"
STOP_AFTER_THOUGHT = "<|im_start|>assistant\n<think>\n\n</think>\n\n"


@dataclass
class Step:
    """One request as the real server saw it."""

    prompt: str  # the rendered request
    held_before: str  # what the slot held when it arrived (previous prompt + "generated" reply)
    prompt_tokens: int
    cached_tokens: int
    prefilled_tokens: int
    output: str  # the scripted reply as the model would have written it
    held_tokens: int = 0  # tokens the slot held when it arrived, as the server counted them
    images: int = 0  # image parts in the request


@dataclass
class Recorder:
    steps: list[Step] = field(default_factory=list)
    held: str = ""
    held_tokens: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def _assistant(reply: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": tc.get("id") or f"call_{i}",
                "type": "function",
                "function": {
                    "name": tc["name"],
                    "arguments": tc["arguments"]
                    if isinstance(tc["arguments"], str)
                    else json.dumps(tc["arguments"]),
                },
            }
            for i, tc in enumerate(reply.tool_calls)
        ]
    return message


def model_output(
    real: RealLlama,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    reply: Reply,
    kwargs: dict[str, Any],
) -> str:
    """The text the model generates for ``reply``, as the server's template renders it.

    A tool message after the reply keeps it "after the last user message" (where the template
    renders its reasoning) and closes it with the end-of-turn token.
    """
    prompt = real.render(messages, tools, **kwargs)
    base = prompt.removesuffix(GENERATION_PROMPT).removesuffix(STOP_AFTER_THOUGHT)
    after = [*messages, _assistant(reply), {"role": "tool", "tool_call_id": "x", "content": "."}]
    full = real.render(after, tools, **kwargs)
    if not full.startswith(base):
        raise AssertionError("the template rendered the earlier messages differently")
    turn = full[len(base) :]
    opened = prompt[len(base) :]
    end = turn.index(END) + len(END)
    return turn[len(opened) : end]


def image_data(messages: list[dict[str, Any]]) -> list[str]:
    """The base64 data of every image part, in the order the rendered prompt has them."""
    out = []
    for m in messages:
        for part in m.get("content") if isinstance(m.get("content"), list) else []:
            if isinstance(part, dict) and part.get("type") == "image_url":
                out.append(part["image_url"]["url"].split(",", 1)[1])
    return out


def on_real_server(
    real: RealLlama, reply: Reply, recorder: Recorder
) -> Callable[[dict[str, Any]], Reply]:
    """A reply source for ``FakeLLMServer.script``: ``reply``'s words, the real server's counts."""

    def answer(body: dict[str, Any]) -> Reply:
        kwargs = {k: body[k] for k in ("chat_template_kwargs",) if k in body}
        messages, tools = body["messages"], body.get("tools")
        slot = body.get("id_slot")  # a client that pins its sessions to slots
        images = image_data(messages)
        with recorder.lock:
            prompt = real.render(messages, tools, **kwargs)
            timings = real.complete(prompt, slot, images)
            output = model_output(real, messages, tools, reply, kwargs)
            held = real.complete(prompt + output, slot, images)
            step = Step(
                prompt=prompt,
                held_before=recorder.held,
                prompt_tokens=timings["cache_n"] + timings["prompt_n"],
                cached_tokens=timings["cache_n"],
                prefilled_tokens=timings["prompt_n"],
                output=output,
                held_tokens=recorder.held_tokens,
                images=len(images),
            )
            recorder.steps.append(step)
            recorder.held = prompt + output
            recorder.held_tokens = held["cache_n"] + held["prompt_n"]
        usage = {
            "prompt_tokens": step.prompt_tokens,
            "completion_tokens": rough_tokens(output),
            "total_tokens": step.prompt_tokens + rough_tokens(output),
            "prompt_tokens_details": {"cached_tokens": step.cached_tokens},
        }
        return dataclasses.replace(reply, usage=usage, timings=timings)

    return answer


def bench_config(base: Path, llm: dict[str, Any]) -> dict[str, Any]:
    """config.toml data for an Agent driven through the scripted server in folder ``base``: no
    librarian, no MCP servers, logs off the console (the real-server benchmarks share it)."""
    return {
        "llm": llm,
        "memory": {"db_path": str(base / "data/luna.db"), "librarian": False},
        "observe": {"log_dir": str(base / "logs"), "console": False},
        "agent": {"workspace": str(base / "ws")},
        "mcp": {"servers_file": str(base / "none.json")},
    }
