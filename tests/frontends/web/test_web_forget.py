"""``DELETE /api/sessions/{id}`` on the real web front-end: refused while a turn runs in the
session, then the session, its own files and its memories go; a file another session uses
stays; the next message in it starts a fresh conversation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from luna.attachments.store import AttachmentStore, attachments_dir, digest
from tests.fakes.attachments import photo
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.mcp.mcp_helpers import wait_until


def _replies(luna: Any, session: str) -> int:
    """Through Luna's own connection: a second SQLite library in this process (the stdlib's)
    would not see its commits reliably."""
    rows = luna.memory.store.query(
        "SELECT count(*) FROM messages WHERE session_id = ? AND role = 'assistant'", (session,)
    )
    return int(rows[0][0])


async def test_web_forget_session_refuses_a_running_turn_then_forgets_files_and_all(
    web_luna: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    luna = await web_luna()
    own, shared = photo(64, 48, fmt="PNG", seed=1), photo(64, 48, fmt="PNG", seed=2)
    llm_server.script(Reply(content="Nice pictures.", delay=2.0), Reply(content="A map."))
    async with luna.client() as client:
        sent = await client.post(
            "/api/sessions/page-a/messages",
            data={"text": "my locker code is 7391"},
            files=[
                ("file", ("own.png", own, "image/png")),
                ("file", ("map.png", shared, "image/png")),
            ],
        )
        assert sent.status_code == 202, sent.text
        await wait_until(lambda: bool(llm_server.requests), "the first turn's request")
        busy = await client.delete("/api/sessions/page-a")
        assert busy.status_code == 409 and "turn running" in busy.json()["error"]
        await wait_until(lambda: _replies(luna, "page-a") == 1, "the first reply")
        other = await client.post(
            "/api/sessions/page-b/messages",
            data={"text": "the town map"},
            files=[("file", ("map.png", shared, "image/png"))],
        )
        assert other.status_code == 202
        await wait_until(lambda: _replies(luna, "page-b") == 1, "the other session's reply")
        await luna.memory.add_memory("locker code 7391", session_id="page-a")

        gone = await client.delete("/api/sessions/page-a")
        assert gone.status_code == 200, gone.text
        body = gone.json()
        assert (body["forgotten"], body["messages"], body["memories"]) == ("page-a", 2, 1)
        assert (body["files_removed"], body["files_kept"]) == (1, 1)

        listed = (await client.get("/api/sessions")).json()["sessions"]
        assert [(s["id"], s["frontend"], s["files"]) for s in listed] == [("page-b", "?", 1)]
        again = await client.delete("/api/sessions/page-a")
        assert again.status_code == 404
        files = AttachmentStore(attachments_dir(luna.cfg.data_dir))
        assert not files.has(digest(own)) and files.has(digest(shared))
        assert await luna.memory.list_memories() == []

        # The next message in the forgotten session starts afresh: nothing of it is sent.
        llm_server.script(Reply(content="Hello again."))
        fresh = await client.post("/api/sessions/page-a/messages", json={"text": "hi"})
        assert fresh.status_code == 202
        await wait_until(lambda: _replies(luna, "page-a") == 1, "the fresh reply")
    sent_after = llm_server.requests[-1]["messages"]
    assert [m["role"] for m in sent_after] == ["system", "user"]
    assert "7391" not in str(sent_after)


async def test_web_session_footprint_says_what_a_forget_would_remove(
    web_luna: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    luna = await web_luna()
    llm_server.script(Reply(content="A cat."))
    async with luna.client() as client:
        assert (await client.get("/api/sessions/page-c")).status_code == 404
        sent = await client.post(
            "/api/sessions/page-c/messages",
            data={"text": "what is this?"},
            files=[("file", ("cat.png", photo(40, 30, fmt="PNG", seed=5), "image/png"))],
        )
        assert sent.status_code == 202, sent.text
        await wait_until(lambda: _replies(luna, "page-c") == 1, "the reply")
        await luna.memory.add_memory("the cat is called Miso", session_id="page-c")

        seen = await client.get("/api/sessions/page-c")
        assert seen.status_code == 200, seen.text
        body = seen.json()
        assert {k: body[k] for k in ("id", "messages", "files", "memories", "tasks")} == {
            "id": "page-c",
            "messages": 2,
            "files": 1,
            "memories": 1,
            "tasks": 0,
        }
        assert body["first_at"] <= body["last_at"]
        assert (await client.get("/api/sessions/a%01b")).status_code == 400
        assert (await client.delete("/api/sessions/page-c")).status_code == 200
        assert (await client.get("/api/sessions/page-c")).status_code == 404
