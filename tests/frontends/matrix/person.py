"""A person on Matrix for the tests: a real mautrix client with its own Olm device.

The owner (and the stranger) are what Element would be: a device with its own keys in its own
crypto store, cross-signed by its account (so Luna's "cross-signed" trust accepts it), syncing
with mautrix's own loop and decrypting what it receives. It sees Luna's answers as Element
shows them: each message's text after its latest ``m.replace`` edit.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from mautrix.api import HTTPAPI
from mautrix.client import Client
from mautrix.crypto import OlmMachine
from mautrix.crypto.attachments import encrypt_attachment
from mautrix.crypto.store.asyncpg import PgCryptoStateStore, PgCryptoStore
from mautrix.types import EventType, RoomID, UserID
from mautrix.util.async_db import Database

from luna.frontends.matrix.connection import open_store
from tests.frontends.matrix.synapse import Account

WAIT_S = 60.0


class Person:
    def __init__(self, account: Account, homeserver: str, folder: Path) -> None:
        self.account = account
        self.homeserver = homeserver
        self.folder = folder
        self.client: Client | None = None
        self.db: Database | None = None
        self.events: list[dict[str, Any]] = []  # every room event seen, decrypted
        self.changed = asyncio.Event()

    @property
    def user_id(self) -> str:
        return self.account.user_id

    async def start(self, *, cross_sign: bool = True) -> Person:
        self.db = await open_store(self.folder / "crypto.db")
        api = HTTPAPI(base_url=self.homeserver, token=self.account.access_token)
        state = PgCryptoStateStore(self.db)
        client = Client(
            mxid=UserID(self.user_id),
            device_id=self.account.device_id,
            api=api,
            state_store=state,
        )
        store = PgCryptoStore(self.user_id, "test", self.db)
        await store.put_device_id(self.account.device_id)
        crypto = OlmMachine(client, store, state)
        await crypto.load()
        client.crypto = crypto  # with mautrix's decrypting dispatcher, as a bot would
        await crypto.share_keys()
        if cross_sign:
            await crypto.generate_recovery_key()
        client.add_event_handler(EventType.ALL, self._seen)
        client.start(None)
        self.client = client
        return self

    async def _seen(self, evt: Any) -> None:
        self.events.append(evt.serialize())
        self.changed.set()

    async def stop(self) -> None:
        if self.client is not None:
            self.client.stop()
            await self.client.api.session.close()
        if self.db is not None:
            await self.db.stop()

    # ---- acting -------------------------------------------------------------------------

    async def create_room(self, invite: list[str], *, encrypted: bool = True, direct: bool = False):
        state = []
        if encrypted:
            state.append(
                {
                    "type": "m.room.encryption",
                    "state_key": "",
                    "content": {"algorithm": "m.megolm.v1.aes-sha2"},
                }
            )
        room = await self.client.create_room(
            invitees=[UserID(u) for u in invite], is_direct=direct, initial_state=state
        )
        return str(room)

    async def send(self, room_id: str, content: dict[str, Any], etype: str = "m.room.message"):
        event_type = EventType.find(etype, EventType.Class.MESSAGE)
        return str(await self.client.send_message_event(RoomID(room_id), event_type, content))

    async def say(self, room_id: str, text: str, **content: Any) -> str:
        return await self.send(room_id, {"msgtype": "m.text", "body": text, **content})

    async def react(self, room_id: str, event_id: str, key: str) -> str:
        relates = {"rel_type": "m.annotation", "event_id": event_id, "key": key}
        return await self.send(room_id, {"m.relates_to": relates}, "m.reaction")

    async def send_image(self, room_id: str, data: bytes, name: str, mime: str) -> str:
        return await self.send_file(room_id, data, name, mime, msgtype="m.image")

    async def send_file(
        self, room_id: str, data: bytes, name: str, mime: str, *, msgtype: str = "m.file"
    ) -> str:
        """An encrypted file (an encrypted room's way: the key travels in the event)."""
        ciphertext, info = encrypt_attachment(data)
        mxc = await self.client.upload_media(ciphertext, mime_type="application/octet-stream")
        file = info.serialize()
        file["url"] = str(mxc)
        content = {
            "msgtype": msgtype,
            "body": name,
            "info": {"mimetype": mime, "size": len(data)},
            "file": file,
        }
        return await self.send(room_id, content)

    # ---- waiting ------------------------------------------------------------------------

    async def wait_until(self, check: Any, within: float = WAIT_S) -> Any:
        """Until ``check()`` returns something truthy (returned)."""
        deadline = time.monotonic() + within
        while True:
            found = check()
            if found:
                return found
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{self.user_id} waited {within} s in vain")
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), min(left, 1.0))
            except TimeoutError:
                pass

    async def wait_joined(self, room_id: str, user_id: str) -> None:
        await self.wait_until(
            lambda: any(
                e.get("room_id") == room_id
                and e.get("type") == "m.room.member"
                and e.get("state_key") == user_id
                and e.get("content", {}).get("membership") == "join"
                for e in self.events
            )
        )

    def messages_from(self, room_id: str, sender: str) -> list[dict[str, Any]]:
        """``sender``'s messages in the room, oldest first, each with its latest edit applied
        (an edit may be decrypted before its original: both orders count)."""
        originals: dict[str, dict[str, Any]] = {}
        edits: list[dict[str, Any]] = []
        for e in self.events:
            if e.get("room_id") != room_id or e.get("sender") != sender:
                continue
            if e.get("type") != "m.room.message":
                continue
            rel = e.get("content", {}).get("m.relates_to") or {}
            if rel.get("rel_type") == "m.replace":
                edits.append(e)
                continue
            originals[e["event_id"]] = {
                "event_id": e["event_id"],
                "content": e.get("content", {}),
                "edits": 0,
                "ts": e.get("origin_server_ts", 0),
            }
        for e in sorted(edits, key=lambda e: e.get("origin_server_ts", 0)):
            content = e["content"]
            target = originals.get(content["m.relates_to"].get("event_id"))
            if target is not None:
                target["content"] = content["m.new_content"] | {
                    "m.relates_to": target["content"].get("m.relates_to")
                }
                target["edits"] += 1
        return sorted(originals.values(), key=lambda m: m["ts"])

    async def answer(
        self,
        room_id: str,
        sender: str,
        expected: str,
        count: int = 1,
        *,
        prefix: bool = False,
        within: float = WAIT_S,
    ):
        """Until ``sender``'s latest ``count`` messages end with ``expected`` as the last one's
        final text (with ``prefix``: its text so far starts with it); the messages."""

        def done() -> list[dict[str, Any]] | None:
            msgs = self.messages_from(room_id, sender)
            body = msgs[-1]["content"].get("body", "") if len(msgs) >= count else None
            if body is not None and (body.startswith(expected) if prefix else body == expected):
                return msgs
            return None

        return await self.wait_until(done, within)
