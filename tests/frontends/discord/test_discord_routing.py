"""The pure routing decision and the session pipeline, without Discord."""

from __future__ import annotations

import asyncio

from luna.config import DiscordConfig
from luna.frontends.channels.pipeline import Batch, Incoming, SessionPipeline
from luna.frontends.discord.routing import MessageFacts, decide, strip_mention

BOT, OWNER, FRIEND, STRANGER = 900, 100, 200, 300
CFG = DiscordConfig(owner_id=OWNER, allowed_users=[FRIEND])


def facts(**kw) -> MessageFacts:
    base = dict(
        author_id=OWNER,
        author_is_bot=False,
        bot_id=BOT,
        content="hi",
        is_dm=False,
        guild_id=1,
        channel_id=10,
        thread_parent_id=None,
        mentions_bot=True,
        known_thread=False,
    )
    base.update(kw)
    return MessageFacts(**base)


def test_routing_ignores_bots_and_itself():
    assert decide(facts(author_is_bot=True), CFG) is None
    assert decide(facts(author_id=BOT), CFG) is None


def test_routing_session_ids_and_scopes():
    dm = decide(facts(is_dm=True, guild_id=None, mentions_bot=False), CFG)
    assert (dm.session_id, dm.scope, dm.allow_tools) == (f"dm-{OWNER}", "owner", True)
    no_threads = CFG.model_copy(update=dict(reply_in_threads=False))
    ch = decide(facts(author_id=FRIEND, content=f"<@{BOT}> yo"), no_threads)
    assert (ch.session_id, ch.scope, ch.text) == (f"ch-10-{FRIEND}", f"user:{FRIEND}", "yo")
    opened = decide(facts(), CFG)
    assert opened.open_thread and opened.session_id == ""
    th = decide(
        facts(channel_id=55, thread_parent_id=10, mentions_bot=False, known_thread=True), CFG
    )
    assert th.session_id == "thread-55" and not th.remember_thread
    assert decide(facts(channel_id=55, thread_parent_id=10, mentions_bot=False), CFG) is None
    joined = decide(facts(channel_id=55, thread_parent_id=10), CFG)
    assert joined.session_id == "thread-55" and joined.remember_thread


def test_routing_channel_needs_mention():
    assert decide(facts(mentions_bot=False), CFG) is None


def test_routing_allowlists():
    guilds = CFG.model_copy(update=dict(allowed_guilds=[2]))
    assert decide(facts(guild_id=1), guilds) is None
    assert decide(facts(guild_id=2), guilds) is not None
    assert decide(facts(is_dm=True, guild_id=None), guilds) is not None  # DMs have no guild
    channels = CFG.model_copy(update=dict(allowed_channels=[10]))
    assert decide(facts(channel_id=11), channels) is None
    assert decide(facts(channel_id=10), channels) is not None
    in_thread = facts(channel_id=77, thread_parent_id=10, known_thread=True)
    assert decide(in_thread, channels) is not None  # a thread counts as its parent channel


def test_routing_strangers():
    assert decide(facts(author_id=STRANGER), CFG) is None
    chatty = CFG.model_copy(update=dict(strangers_can_chat=True))
    r = decide(facts(author_id=STRANGER), chatty)
    assert r is not None and not r.allow_tools and r.scope == f"user:{STRANGER}"
    nobody = DiscordConfig()  # no owner configured: nobody is trusted
    assert decide(facts(author_id=0), nobody) is None


def test_routing_strip_mention():
    assert strip_mention(f"<@{BOT}> hello <@!{BOT}> there", BOT) == "hello there"
    assert strip_mention(f"hey <@123> <@{BOT}>", BOT) == "hey <@123>"


async def test_pipeline_serializes_a_session_and_overlaps_sessions():
    log: list[str] = []
    gate = asyncio.Event()
    b_done, a2_done = asyncio.Event(), asyncio.Event()

    async def handler(batch: Batch) -> None:
        name = batch.items[0].payload
        log.append(f"start {name}")
        if name == "a1":
            await gate.wait()
        log.append(f"end {name}")
        {"b1": b_done, "a2": a2_done}.get(name, asyncio.Event()).set()

    pipe = SessionPipeline(handler, burst_window=0)
    pipe.submit(Incoming(1, "A", OWNER, "a1"))
    pipe.submit(Incoming(2, "A", OWNER, "a2"))
    pipe.submit(Incoming(3, "B", OWNER, "b1"))
    await asyncio.wait_for(b_done.wait(), 5)
    assert log == ["start a1", "start b1", "end b1"]  # B ran while A's first turn waits
    gate.set()
    await asyncio.wait_for(a2_done.wait(), 5)
    assert log[3:] == ["end a1", "start a2", "end a2"]
    await pipe.aclose()


def test_pipeline_admits_each_message_id_once_and_remembers_the_latest():
    async def never_called(batch: Batch) -> None:
        raise AssertionError("admit alone runs no turn")

    pipe = SessionPipeline(never_called, burst_window=0, max_seen=2)
    assert pipe.admit(1) and not pipe.admit(1)  # a replayed event is refused
    assert pipe.admit(2) and pipe.admit(3)  # 1 is now the oldest of three: forgotten
    assert not pipe.admit(3) and not pipe.admit(2)
    assert pipe.admit(1)


async def test_pipeline_merges_bursts_per_author():
    batches: list[list[str]] = []
    both = asyncio.Event()

    async def handler(batch: Batch) -> None:
        batches.append([i.payload for i in batch.items])
        if len(batches) == 2:
            both.set()

    pipe = SessionPipeline(handler, burst_window=0.3)
    pipe.submit(Incoming(1, "S", OWNER, "x"))
    pipe.submit(Incoming(2, "S", OWNER, "y"))
    pipe.submit(Incoming(3, "S", FRIEND, "z"))  # another author closes the burst
    await asyncio.wait_for(both.wait(), 5)  # z's burst closes after the window of quiet
    assert batches == [["x", "y"], ["z"]]
    await pipe.aclose()


async def test_pipeline_survives_a_failing_handler():
    done: list[str] = []
    good = asyncio.Event()

    async def handler(batch: Batch) -> None:
        if batch.items[0].payload == "bad":
            raise RuntimeError("boom")
        done.append(batch.items[0].payload)
        good.set()

    pipe = SessionPipeline(handler, burst_window=0)
    pipe.submit(Incoming(1, "S", OWNER, "bad"))
    pipe.submit(Incoming(2, "S", OWNER, "good"))
    await asyncio.wait_for(good.wait(), 5)
    assert done == ["good"]
    await pipe.aclose()
