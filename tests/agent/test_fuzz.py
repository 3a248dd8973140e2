"""Fuzzing the model's side: the real Agent (real Memory, real tool registry, real sandbox)
against a scripted server that misbehaves at random.

Each case is one turn whose replies are drawn at random: broken and cut SSE streams, invalid
and truncated tool-call JSON, unknown tools, 200 calls in one reply, lone surrogates, 2 MB
replies, bursts of 4xx and 5xx, ``finish_reason: length`` in the middle of a call, garbage
usage figures. After each case a plain message must still be answered ("the session is not
broken"), no turn may crash (end as "Internal error": a bug of Luna's, where a model mistake
must be one clear line), and at the end every user message sent must be in the session log,
stored as sent (only lone surrogates replaced by U+FFFD): "no message lost".

CI runs a fixed seed and a bounded count. Re-run at random with ``LUNA_FUZZ_SEED=random`` (or
any integer) and ``LUNA_FUZZ_CASES=N``; the figures are printed, and the failure message says
which case and seed broke what, so any finding can be replayed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import re
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from luna import observe
from luna.agent import Agent
from luna.config import Config
from luna.llm import LLMClient
from luna.memory import Memory
from luna.messages import InboundMessage, TurnDone, TurnFailed, clean_text
from luna.tools import build_registry
from tests.fakes.llm_server import FakeLLMServer, Reply

DEFAULT_SEED = 16
DEFAULT_CASES = 50
TURN_LIMIT = 60.0  # seconds: a case that takes longer counts as a broken session
TAG = re.compile(r"\[(case|ping) (\d+)\]")
SAFE_TOOLS = ("read_file", "write_file", "list_files", "bash")
WEIRD = [
    "\ud800",
    "\udfff",
    "\x00",
    "\x1b[2J",
    '"',
    "\\",
    "\\u12",
    "{",
    "}",
    "]",
    "\n",
    "\u2028",
    "é",
    "😀",
    "<tool_call>",
    "</tool_call>",
    "<think>",
    "</think>",
    "<|im_end|>",
    "<function=bash>",
    '{"name": "bash", "arguments": {"command": "echo hi"}}',
    "data: ",
    "[DONE]",
]


def fuzz_seed() -> int:
    raw = os.environ.get("LUNA_FUZZ_SEED", "")
    if raw == "random":
        return random.SystemRandom().randrange(2**32)
    return int(raw) if raw else DEFAULT_SEED


def fuzz_cases() -> int:
    return int(os.environ.get("LUNA_FUZZ_CASES") or DEFAULT_CASES)


def junk(rng: random.Random, n: int = 40) -> str:
    """Text with a good share of what breaks parsers, encoders and templates."""
    parts = []
    for _ in range(rng.randint(1, n)):
        if rng.random() < 0.35:
            parts.append(rng.choice(WEIRD))
        else:
            parts.append(chr(rng.randint(32, 0x2FF)))
    return "".join(parts)


def valid_call(rng: random.Random) -> dict[str, Any]:
    name = rng.choice(SAFE_TOOLS)
    args: dict[str, Any] = {
        "read_file": {"path": rng.choice(["nope.txt", "notes.txt", "../../etc/passwd"])},
        "write_file": {"path": "notes.txt", "content": junk(rng, 20)},
        "list_files": {"path": "."},
        "bash": {"command": "echo fuzz"},
    }[name]
    return {"name": name, "arguments": json.dumps(args)}


def broken_call(rng: random.Random) -> dict[str, Any]:
    kind = rng.choice(["garbage", "truncated", "unknown", "not-object", "surrogate-name"])
    if kind == "garbage":
        return {"name": rng.choice(SAFE_TOOLS), "arguments": junk(rng)}
    if kind == "truncated":
        whole = valid_call(rng)
        return {**whole, "arguments": whole["arguments"][: rng.randint(0, 12)]}
    if kind == "unknown":
        return {"name": junk(rng, 8) or "x", "arguments": "{}"}
    if kind == "not-object":
        return {"name": "read_file", "arguments": rng.choice(["[]", "42", '"s"', "null"])}
    return {"name": "read_\ud800file", "arguments": '{"path": "\ud800"}'}


def reply(rng: random.Random) -> tuple[str, Reply]:
    """One misbehaving answer, and the name of what it does."""
    kind = rng.choice(
        [
            "cut-stream",
            "raw-bytes",
            "broken-calls",
            "many-calls",
            "surrogates",
            "huge",
            "burst-4xx",
            "burst-5xx",
            "length-mid-call",
            "garbage-usage",
            "markup-text",
            "empty",
        ]
    )
    if kind == "cut-stream":
        calls = [valid_call(rng)] if rng.random() < 0.5 else []
        return kind, Reply(content=junk(rng), tool_calls=calls, abort_after=rng.randint(0, 8))
    if kind == "raw-bytes":
        raw = bytes(rng.randrange(256) for _ in range(rng.randint(1, 30)))
        return kind, Reply(raw_bytes=raw, content=junk(rng, 5))
    if kind == "broken-calls":
        calls = [broken_call(rng) for _ in range(rng.randint(1, 4))]
        return kind, Reply(content=junk(rng, 5), tool_calls=calls)
    if kind == "many-calls":
        calls = [valid_call(rng) if rng.random() < 0.7 else broken_call(rng) for _ in range(200)]
        return kind, Reply(tool_calls=calls, chunk_size=4096)
    if kind == "surrogates":
        return kind, Reply(content=f"a\ud800b{junk(rng)}\udc80", reasoning="\udfff thought")
    if kind == "huge":
        return kind, Reply(content=("2 MB of reply. " * 140_000)[:2_000_000], chunk_size=65536)
    if kind == "burst-4xx":
        status = rng.choice([400, 401, 403, 404, 413, 422, 429])
        after = rng.choice(["soon", "-1", "nan", "0.01"])
        return kind, Reply(status=status, headers={"Retry-After": after})
    if kind == "burst-5xx":
        after = rng.choice(["nan", "0.01", "inf"])
        return kind, Reply(status=rng.choice([500, 502, 503, 504]), headers={"Retry-After": after})
    if kind == "length-mid-call":
        whole = valid_call(rng)
        cut = {**whole, "arguments": whole["arguments"][: rng.randint(1, 20)]}
        return kind, Reply(tool_calls=[valid_call(rng), cut], finish_reason="length")
    if kind == "garbage-usage":
        usage = rng.choice(
            [{"prompt_tokens": "lots"}, {"prompt_tokens": -5, "completion_tokens": None}, {}]
        )
        return kind, Reply(content="fine", usage=usage, timings={"prompt_n": "x"})
    if kind == "markup-text":
        return kind, Reply(content=rng.choice(WEIRD[13:]) + junk(rng) + rng.choice(WEIRD[13:]))
    return kind, Reply(content="")


@dataclass
class Case:
    number: int
    text: str
    replies: list[Reply]
    kinds: list[str]


@dataclass
class Script:
    """Serves each turn's scripted replies by the tag in its newest tagged user message."""

    cases: dict[int, Case] = field(default_factory=dict)
    served: dict[int, int] = field(default_factory=dict)

    def __call__(self, body: dict[str, Any]) -> Reply:
        for message in reversed(body.get("messages") or []):
            content = message.get("content") if message.get("role") == "user" else None
            match = TAG.search(content) if isinstance(content, str) else None
            if match is None:
                continue
            kind, n = match.group(1), int(match.group(2))
            if kind == "ping":
                return Reply(content=f"pong {n}")
            case = self.cases[n]
            i = self.served.get(n, 0)
            self.served[n] = i + 1
            return case.replies[i] if i < len(case.replies) else Reply(content=f"case {n} done")
        return Reply(content="(no tag)")


def make_case(rng: random.Random, n: int) -> Case:
    picked = [reply(rng) for _ in range(rng.randint(1, 4))]
    # The text carries the tag first: a front-end may hand over anything after it.
    text = f"[case {n}] " + junk(rng, 30) if rng.random() < 0.7 else f"[case {n}] plain"
    return Case(n, text, [r for _, r in picked], [k for k, _ in picked])


@pytest.fixture
async def fuzz_agent(
    luna_config: Callable[..., Config], tmp_path: Path
) -> AsyncIterator[tuple[Agent, Config]]:
    cfg = luna_config({"agent": {"max_rounds": 4}, "llm": {"max_retries": 2}})
    observe.setup(cfg.observe.log_dir, console=False)
    memory = Memory(cfg.memory)
    await memory.open(background=False)
    llm = LLMClient(cfg.llm)
    registry = await asyncio.to_thread(build_registry, cfg, probe=True)
    cfg.agent.workspace.mkdir(parents=True, exist_ok=True)
    try:
        yield Agent(cfg, llm, memory, registry), cfg
    finally:
        await llm.close()
        await memory.close()
        observe.shutdown()


async def run(agent: Agent, text: str) -> tuple[list[Any], str | None]:
    """The turn's events, and what went wrong with the turn itself (None: it ended)."""
    events: list[Any] = []
    try:
        async with asyncio.timeout(TURN_LIMIT):
            async for event in agent.run_turn(InboundMessage(session_id="fuzz", text=text)):
                events.append(event)
    except TimeoutError:
        return events, f"no end within {TURN_LIMIT:g} s"
    except Exception as e:  # a finding, reported below
        return events, f"raised {type(e).__name__}: {e}"
    if not events or not isinstance(events[-1], TurnDone | TurnFailed):
        return events, f"ended without TurnDone/TurnFailed: {events[-1:]!r}"
    return events, None


def logged_user_texts(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT content FROM messages WHERE role = 'user' ORDER BY id")
        return [r[0] for r in rows]


@pytest.mark.slow  # 36 s on the shared 2-core box (2026-12-05)
async def test_fuzz_the_model_side_breaks_no_session_and_loses_no_message(
    fuzz_agent: tuple[Agent, Config], llm_server: FakeLLMServer, caplog: pytest.LogCaptureFixture
) -> None:
    agent, cfg = fuzz_agent
    seed, count = fuzz_seed(), fuzz_cases()
    rng = random.Random(seed)
    script = Script()
    llm_server.default = script
    sent: list[str] = []
    broken: list[str] = []
    crashed: list[str] = []  # turns that ended as "Internal error" (the traceback is logged)
    kinds: dict[str, int] = {}
    started = time.monotonic()
    caplog.set_level(logging.ERROR, logger="luna.agent.loop")
    for n in range(count):
        case = make_case(rng, n)
        script.cases[n] = case
        for kind in case.kinds:
            kinds[kind] = kinds.get(kind, 0) + 1
        sent.append(case.text)
        before = len(caplog.records)
        _, problem = await run(agent, case.text)
        if problem is not None:
            broken.append(f"case {n} {case.kinds}: the turn {problem}")
        crashes = [r for r in caplog.records[before:] if r.getMessage() == "turn crashed"]
        for record in crashes:
            kind = record.exc_info[1] if record.exc_info else None
            crashed.append(f"case {n} {case.kinds}: {type(kind).__name__}: {kind}")
        ping = f"[ping {n}] are you still there?"
        sent.append(ping)
        events, problem = await run(agent, ping)
        last = events[-1] if events else None
        if problem is not None or not (isinstance(last, TurnDone) and last.reply == f"pong {n}"):
            broken.append(f"case {n} {case.kinds}: the next plain message got {last!r} {problem}")
    logged = logged_user_texts(cfg.memory.db_path)
    lost = [t for t in sent if clean_text(t) not in logged]
    figures = {
        "seed": seed,
        "cases": count,
        "sessions_broken": len(broken),
        "turns_crashed": len(crashed),
        "messages_lost": len(lost),
        "messages_sent": len(sent),
        "requests": len(llm_server.requests),
        "seconds": round(time.monotonic() - started, 1),
        "kinds": dict(sorted(kinds.items())),
    }
    print("fuzz:", json.dumps(figures))
    assert not broken, f"seed {seed}: {len(broken)} broken: " + "; ".join(broken[:5])
    assert not crashed, f"seed {seed}: {len(crashed)} crashed: " + "; ".join(crashed[:5])
    assert not lost, f"seed {seed}: {len(lost)} lost, e.g. {lost[:3]!r}"
