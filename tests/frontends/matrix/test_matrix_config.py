"""Matrix in the settings other parts read: where the owner's results go, who may schedule,
how an owner's answer to an approval prompt is read, when the sync token is saved, which
messages a restart must not answer again (no homeserver needed)."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable
from typing import Any

from luna.config.hooks import HookConfig
from luna.frontends.matrix.adapter import verdict
from luna.frontends.matrix.conversation import Room
from luna.frontends.matrix.settle import TokenKeeper
from luna.frontends.matrix.sync_token import SyncTokens
from luna.frontends.matrix.taken import KEEP_DAYS, TakenEvents
from luna.hooks.target import hook_target, target_problem
from luna.memory import Memory
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


async def test_matrix_sync_token_waits_for_the_batches_messages(
    luna_config: Callable[..., Any],
) -> None:
    memory = Memory(luna_config().memory)
    await memory.open(background=False, use_vectors=False)
    try:
        tokens = SyncTokens(memory.store)
        keeper = TokenKeeper(tokens, OWNER, max_hold=3600)
        await keeper.batch_done("t1")  # nothing taken in: saved at once
        assert await tokens.load(OWNER) == "t1"
        keeper.hold("$a")
        await keeper.batch_done("t2")
        keeper.hold("$b")
        await keeper.batch_done("t3")
        await keeper.batch_done("t4")
        keeper.settle(["$b"])
        await keeper.flush()
        assert await tokens.load(OWNER) == "t1"  # $a, of an earlier batch, is still open
        keeper.settle(["$a", "$unknown"])
        await keeper.flush()
        assert await tokens.load(OWNER) == "t4" and keeper.unsettled == 0
        keeper.max_hold = 0.0  # a receipt that never comes holds the token only so long
        keeper.hold("$lost")
        await keeper.batch_done("t5")
        await asyncio.sleep(0.01)
        await keeper.flush()
        assert await tokens.load(OWNER) == "t5" and keeper.unsettled == 0
    finally:
        await memory.close()


async def test_matrix_taken_events_survive_a_restart_and_age_out(
    luna_config: Callable[..., Any],
) -> None:
    cfg = luna_config()
    memory = Memory(cfg.memory)
    await memory.open(background=False, use_vectors=False)
    try:
        taken = TakenEvents(memory.store, OWNER)
        await taken.record(["$a", "$b"])
        await taken.record(["$a"])  # recorded again: no error, one row
        old = (dt.datetime.now(dt.UTC) - dt.timedelta(days=KEEP_DAYS, hours=1)).isoformat()
        with memory.store.transaction() as conn:
            conn.execute("UPDATE matrix_taken SET created_at = ? WHERE event_id = '$b'", (old,))
    finally:
        await memory.close()
    memory = Memory(cfg.memory)  # the next start, on the same database
    await memory.open(background=False, use_vectors=False)
    try:
        taken = TakenEvents(memory.store, OWNER)
        assert await taken.has("$a") and await taken.has("$b")
        assert not await taken.has("$c")
        assert not await TakenEvents(memory.store, FRIEND).has("$a")  # per bot account
        await taken.record(["$c"])  # adding rows prunes those past KEEP_DAYS
        assert [await taken.has(e) for e in ("$a", "$b", "$c")] == [True, False, True]
    finally:
        await memory.close()
