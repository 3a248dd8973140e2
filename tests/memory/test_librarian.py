"""The librarian against the scripted LLM server: compaction, facts, dedup, supersede, backoff."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable

import pytest

from luna.config import Config
from luna.llm import LLMClient
from luna.memory import Memory
from luna.memory.embedding.embeddings import Embedder
from luna.memory.librarian import Librarian, compaction_boundary, parse_json_object
from luna.messages import LoggedMessage
from tests.conftest import Reply
from tests.history import prompt_view


@pytest.fixture
async def parts(
    luna_config: Callable[..., Config], embedder: Embedder
) -> AsyncIterator[tuple[Config, Memory, LLMClient]]:
    cfg = luna_config({"memory": {"compact_every_messages": 10, "retain_messages": 4}})
    mem = Memory(cfg.memory)
    await mem.open()
    llm = LLMClient(cfg.llm)
    try:
        yield cfg, mem, llm
    finally:
        await llm.close()
        await mem.close()


def _call(call_id: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": "{}"}}


async def _chat(mem: Memory, sid: str, n_pairs: int) -> None:
    for i in range(n_pairs):
        await mem.append_message(sid, {"role": "user", "content": f"question {i} about Porto"})
        await mem.append_message(sid, {"role": "assistant", "content": f"answer {i}"})


def test_parse_json_object_handles_think_fences_and_prose() -> None:
    assert parse_json_object('<think>{"no": 1}</think>Sure! ```json\n{"a": 1}\n``` bye') == {"a": 1}
    assert parse_json_object('Here you go: {"a": {"b": [1, 2]}} Hope it helps {x}') == {
        "a": {"b": [1, 2]}
    }
    assert parse_json_object('reasoning... </think>\n{"a": 2}') == {"a": 2}
    with pytest.raises(ValueError):
        parse_json_object("no json here {oops")


def test_compaction_boundary_never_splits_tool_results() -> None:
    roles = ["user", "assistant", "tool", "tool", "assistant", "user"]
    msgs = [LoggedMessage(id=i, role=r, content="") for i, r in enumerate(roles, 1)]
    assert compaction_boundary(msgs, 3) == 1  # first kept would be a tool result: keep the call
    assert compaction_boundary(msgs, 2) == 4
    assert compaction_boundary(msgs, 10) == 0


async def test_librarian_compacts_and_extracts_facts(parts, llm_server) -> None:
    cfg, mem, llm = parts
    sid = "s1"
    await _chat(mem, sid, 4)
    await mem.append_message(sid, {"role": "assistant", "content": "", "tool_calls": [_call("t")]})
    await mem.append_message(sid, {"role": "tool", "tool_call_id": "t", "content": "ok"})
    await _chat(mem, sid, 2)  # 14 messages; the last 4 are kept
    reply = {
        "summary": "The user asked about Porto several times.",
        "facts": [
            {"text": "The user plans to visit Porto in June 2026.", "importance": 7},
            {"text": "The user said hello.", "importance": 1},
        ],
    }
    llm_server.script(Reply(content="<think>ok</think>```json\n" + json.dumps(reply) + "\n```"))
    lib = Librarian(mem, llm, cfg)
    assert lib.maybe_schedule(sid, prompt_tokens=100) is True
    assert lib.maybe_schedule(sid, prompt_tokens=100) is False  # one pass per session
    await lib.wait_idle()
    summary, history = await prompt_view(mem, sid)
    assert summary == reply["summary"]
    assert len(history) == 4 and history[0]["role"] == "user"
    facts = await mem.list_memories()
    assert [f["text"] for f in facts] == ["The user plans to visit Porto in June 2026."]
    assert facts[0]["importance"] == 7 and facts[0]["session_id"] == sid
    (request,) = llm_server.requests
    assert request["response_format"] == {"type": "json_object"}
    assert "question 0 about Porto" in request["messages"][-1]["content"]
    assert "question 5 about Porto" not in request["messages"][-1]["content"]  # retained
    # Soft cut: the compacted originals are still searchable.
    hits = await mem.recall("question 0 about Porto", k=20)
    assert any(h.kind == "message" and h.text == "question 0 about Porto" for h in hits)
    await lib.aclose()


async def test_librarian_merges_duplicates_and_supersedes_contradictions(parts, llm_server):
    cfg, mem, llm = parts
    sid = "s2"
    porto = await mem.add_memory("Alex lives in Porto, Portugal.", importance=8)
    green = await mem.add_memory("Alex's favourite colour is green.", importance=4)
    await _chat(mem, sid, 6)
    facts = {
        "summary": "Alex moved.",
        "facts": [
            {"text": "Alex's favourite colour is green.", "importance": 6},
            {"text": "Alex now lives in Lisbon, Portugal.", "importance": 8},
        ],
    }

    def supersede(body: dict) -> Reply:
        prompt = body["messages"][-1]["content"]
        assert f"id={porto}" in prompt
        return Reply(content=json.dumps({"replaces": {"0": [porto]}}))

    llm_server.script(Reply(content=json.dumps(facts)), supersede)
    lib = Librarian(mem, llm, cfg)
    lib.maybe_schedule(sid, None)
    await lib.wait_idle()
    rows = {r["id"]: r for r in await mem.list_memories()}
    assert len(rows) == 3  # the duplicate was merged, not stored again
    assert rows[green]["importance"] == 6
    lisbon = next(i for i, r in rows.items() if "Lisbon" in r["text"])
    assert rows[porto]["superseded_by"] == lisbon
    hits = await mem.recall("where does Alex live", k=5)
    order = [h.id for h in hits if h.kind == "memory"]
    assert order.index(lisbon) < order.index(porto)


async def test_librarian_retries_once_then_backs_off(parts, llm_server) -> None:
    cfg, mem, llm = parts
    sid = "s3"
    await _chat(mem, sid, 6)
    llm_server.script(Reply(content="I cannot do JSON"), Reply(content="still no json"))
    lib = Librarian(mem, llm, cfg)
    assert lib.maybe_schedule(sid, None)
    await lib.wait_idle()
    assert len(llm_server.requests) == 2  # the first try and one retry
    assert (await mem.summary(sid)) == (None, 0)
    assert lib.maybe_schedule(sid, None) is False  # backing off: no transcript re-sent
    assert len(llm_server.requests) == 2


async def test_librarian_waits_for_enough_messages_or_context(parts, llm_server) -> None:
    cfg, mem, llm = parts
    await _chat(mem, "s4", 2)  # 4 messages: below both triggers
    lib = Librarian(mem, llm, cfg)
    lib.maybe_schedule("s4", prompt_tokens=10)
    await lib.wait_idle()
    assert llm_server.requests == []
    await _chat(mem, "s4", 2)  # 8 messages, but the context is nearly full
    llm_server.script(Reply(content=json.dumps({"summary": "short", "facts": []})))
    lib.maybe_schedule("s4", prompt_tokens=int(cfg.llm.context_tokens * 0.9))
    await lib.wait_idle()
    assert len(llm_server.requests) == 1
    assert (await mem.summary("s4"))[0] == "short"
