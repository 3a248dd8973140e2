"""Matrix in the settings other parts read: where the owner's results go, who may schedule,
how an owner's answer to an approval prompt is read, when the sync token is saved, which
messages a restart must not answer again (no homeserver needed)."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

from luna.config.hooks import HookConfig
from luna.frontends.channels.contract import InboundEvent
from luna.frontends.channels.cursor import KEEP_DAYS, ChannelLedger
from luna.frontends.matrix.adapter import verdict
from luna.frontends.matrix.conversation import Room
from luna.frontends.matrix.inbound import CODEC
from luna.frontends.matrix.settle import TokenKeeper
from luna.hooks.target import hook_target, target_problem
from luna.memory import Memory
from luna.memory.storage.migrations import MIGRATIONS
from luna.memory.storage.recover import recover
from luna.memory.storage.store import Store
from luna.scheduler.model import Target, owner_target
from luna.scheduler.rights import role_of
from luna.tools.permissions import resolve_level
from tests.fakes.telegram_server import TOKEN

OWNER, FRIEND = "@me:example.org", "@friend:example.org"
SECTION = {"homeserver": "https://example.org", "owner": OWNER, "allowed_users": [FRIEND]}


def test_matrix_owner_target_for_hooks_and_the_heartbeat(luna_config: Callable[..., Any]) -> None:
    cfg = luna_config({"matrix": SECTION}, env={"MATRIX_PASSWORD": "pw"})
    target = owner_target(cfg)
    assert target == Target("matrix", {"user_id": OWNER, "is_dm": True})
    assert owner_target(cfg, "matrix") == target and owner_target(cfg, "repl") == Target("repl")
    assert target_problem(cfg, target) is None
    room = Target("matrix", {"room_id": "!abc:example.org", "user_id": FRIEND})
    assert target_problem(cfg, room) is None
    assert "room_id" in (target_problem(cfg, Target("matrix", {"room_id": "abc"})) or "")
    hook = HookConfig(deliver_to="matrix")
    assert hook_target(cfg, "door", hook) == (target, None)
    no_login = luna_config({"matrix": SECTION})
    assert "login" in (target_problem(no_login, target) or "")
    assert [role_of(cfg, u) for u in (OWNER, FRIEND, "@x:example.org")] == [
        "owner", "trusted", "stranger"
    ]  # fmt: skip


def test_matrix_is_the_owner_default_only_without_discord_or_telegram(
    luna_config: Callable[..., Any],
) -> None:
    cfg = luna_config({"matrix": SECTION, "telegram": {"owner_id": 42}},
                      env={"MATRIX_PASSWORD": "pw", "TELEGRAM_TOKEN": TOKEN})  # fmt: skip
    assert owner_target(cfg).frontend == "telegram"


def test_matrix_room_addresses_round_trip() -> None:
    room = Room("!r:example.org", "$root", reply_to="$asked")
    assert Room.from_address(room.address(OWNER)) == Room("!r:example.org", "$root")
    assert Room.from_address({"user_id": OWNER, "is_dm": True}) is None


def test_matrix_approval_answers() -> None:
    answers = ("✅", "👍", "Yes.", "ok", "❌", "👎", "no", "n", "maybe", "🎉")
    assert [verdict(a) for a in answers] == [
        True, True, True, True, False, False, False, False, None, None
    ]  # fmt: skip


def test_matrix_has_tool_permissions_of_its_own(luna_config: Callable[..., Any]) -> None:
    cfg = luna_config({"tools": {"permissions": {"bash": "ask"},
                                 "matrix_permissions": {"bash": "deny"}}})  # fmt: skip
    assert resolve_level(cfg.tools, "bash", "matrix", "allow") == "deny"
    assert resolve_level(cfg.tools, "bash", "telegram", "allow") == "ask"


def ledger_of(memory: Memory, account: str = OWNER) -> ChannelLedger:
    return ChannelLedger(memory.store, "matrix", account, CODEC)


async def test_matrix_sync_token_waits_for_the_batches_messages(
    luna_config: Callable[..., Any],
) -> None:
    memory = Memory(luna_config().memory)
    await memory.open(background=False, use_vectors=False)
    try:
        ledger = ledger_of(memory)
        keeper = TokenKeeper(ledger, max_hold=3600)
        await keeper.batch_done("t1")  # nothing taken in: saved at once
        assert await ledger.cursor() == "t1"
        keeper.hold("$a")
        await keeper.batch_done("t2")
        keeper.hold("$b")
        await keeper.batch_done("t3")
        await keeper.batch_done("t4")
        keeper.settle(["$b"])
        await keeper.flush()
        assert await ledger.cursor() == "t1"  # $a, of an earlier batch, is still open
        keeper.settle(["$a", "$unknown"])
        await keeper.flush()
        assert await ledger.cursor() == "t4" and keeper.unsettled == 0
        keeper.max_hold = 0.0  # a receipt that never comes holds the token only so long
        keeper.hold("$lost")
        await keeper.batch_done("t5")
        await asyncio.sleep(0.01)
        await keeper.flush()
        assert await ledger.cursor() == "t5" and keeper.unsettled == 0
    finally:
        await memory.close()


def event(event_id: str, room: Room, text: str) -> InboundEvent:
    return InboundEvent(event_id, OWNER, False, room, f"mx-dm-{room.room_id}", text,
                        is_private=room.reply_to is None, addressed=True,
                        address=room.address(OWNER))  # fmt: skip


async def test_matrix_ledger_resumes_unanswered_turns_and_ages_out_answered_ones(
    luna_config: Callable[..., Any],
) -> None:
    cfg = luna_config()
    in_thread = event("$a", Room("!r:example.org", "$root"), "in a thread")
    replied = event("$b", Room("!g:example.org", None, "$b"), "in a group")
    memory = Memory(cfg.memory)
    await memory.open(background=False, use_vectors=False)
    try:
        ledger = ledger_of(memory)
        await ledger.stored(None, 7, [in_thread])
        await ledger.stored(None, 8, [replied])
        await ledger.answered(["$b"])
        old = (dt.datetime.now(dt.UTC) - dt.timedelta(days=KEEP_DAYS, hours=1)).isoformat()
        with memory.store.transaction() as conn:
            conn.execute("UPDATE channel_turns SET answered_at = ? WHERE event_id = '$b'", (old,))
    finally:
        await memory.close()
    memory = Memory(cfg.memory)  # the next start, on the same database
    await memory.open(background=False, use_vectors=False)
    try:
        ledger = ledger_of(memory)
        turns = await ledger.unanswered()
        assert [(t.event_ids, t.message_id) for t in turns] == [(("$a",), 7)]
        assert turns[0].events == (in_thread,)  # same room, thread, session and text
        assert await ledger.has("$a") and await ledger.has("$b")  # answered, still known
        assert not await ledger.has("$c")
        assert not await ledger_of(memory, FRIEND).has("$a")  # per bot account
        await ledger.answered(["$a"])
        assert await ledger.unanswered() == []
        await ledger.stored(None, 9, [event("$c", Room("!r:example.org"), "new")])
        assert [await ledger.has(e) for e in ("$a", "$b", "$c")] == [True, False, True]
    finally:
        await memory.close()


def older_file(path: Path) -> Store:
    """A database of the release before m014, with a Matrix token and a taken event."""
    store = Store(path)
    store.migrate([m for m in MIGRATIONS if m[0] != "m014_channel_turns_answered"])
    with store.transaction() as conn:
        conn.execute("INSERT INTO matrix_sync VALUES (?, 's42_7', '2026-12-01T00:00:00+00:00')",
                     (OWNER,))  # fmt: skip
        conn.execute("INSERT INTO matrix_taken VALUES (?, '$old', '2026-12-01T00:00:00+00:00')",
                     (OWNER,))  # fmt: skip
    return store


def test_matrix_upgrade_moves_the_sync_token_and_taken_events_to_the_ledger(
    tmp_path: Path,
) -> None:
    store = older_file(tmp_path / "old.db")
    assert store.migrate() == ["m014_channel_turns_answered"]
    rows = store.query("SELECT channel, account, cursor FROM channel_cursors")
    assert rows == [("matrix", OWNER, "s42_7")]
    rows = store.query("SELECT event_id, answered_at IS NOT NULL FROM channel_turns")
    assert rows == [("$old", 1)]  # known, and never resumed
    tables = {r[0] for r in store.query("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert not tables & {"matrix_sync", "matrix_taken"}
    store.close()


def test_matrix_recover_of_an_older_file_keeps_the_sync_token_and_taken_events(
    tmp_path: Path,
) -> None:
    """``luna db recover`` builds the current schema: an older file's Matrix rows go where
    m014 puts them, or the next start would take the timeline since as history."""
    older_file(tmp_path / "old.db").close()
    recover(tmp_path / "old.db", tmp_path / "recovered.db")
    store = Store(tmp_path / "recovered.db")
    try:
        assert store.migrate() == []
        rows = store.query("SELECT channel, account, cursor FROM channel_cursors")
        assert rows == [("matrix", OWNER, "s42_7")]
        rows = store.query("SELECT event_id, answered_at IS NOT NULL FROM channel_turns")
        assert rows == [("$old", 1)]
    finally:
        store.close()
