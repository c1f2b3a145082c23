"""The owner's phone in the channel's tests (SPEC §21.4): a real `matrix-nio` client with its own
crypto store, syncing in a thread of its own, so a test drives it with plain calls.

    with Phone(hs, account, folder) as phone:
        room = phone.create_room(invite=[box_user], encrypted=True)
        root = phone.send(room, "hello")
        phone.wait_text(lambda text: "done" in text)

It sees what any Matrix app would: every event of its rooms, decrypted where it can, with
edits applied (`text_of`). Reactions in an encrypted room are sent encrypted, as Element does.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import nio  # type: ignore[import-untyped, unused-ignore]

from tests.support.synapse import Account, Homeserver

T = TypeVar("T")
ENCRYPTION = {
    "type": "m.room.encryption",
    "state_key": "",
    "content": {"algorithm": "m.megolm.v1.aes-sha2"},
}


@dataclass
class Seen:
    event_id: str
    sender: str
    kind: str  # "message", "reaction", "undecrypted"
    content: dict[str, Any] = field(default_factory=dict)
    encrypted: bool = False

    @property
    def relates(self) -> dict[str, Any]:
        found = self.content.get("m.relates_to")
        return found if isinstance(found, dict) else {}


_shared: asyncio.AbstractEventLoop | None = None
_shared_lock = threading.Lock()


def _phones_loop() -> asyncio.AbstractEventLoop:
    """The one event loop every phone of the process runs on: nio's crypto stores bind their
    tables for each query (peewee's `bind_ctx`, process-wide), which two threads would race."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = asyncio.new_event_loop()
            threading.Thread(target=_shared.run_forever, daemon=True, name="phones").start()
        return _shared


class Phone:
    def __init__(self, hs: Homeserver, account: Account, folder: Path) -> None:
        self.account = account
        self.user = account.user_id
        folder.mkdir(parents=True, exist_ok=True)
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self._loop = _phones_loop()
        self._stopping = False
        self._syncer: Any = None
        self.client: Any = self.run(self._client(hs, account, folder))

    @staticmethod
    async def _client(hs: Homeserver, account: Account, folder: Path) -> Any:
        client = nio.AsyncClient(
            hs.url, account.user_id, device_id=account.device_id, store_path=str(folder),
            config=nio.AsyncClientConfig(store_sync_tokens=False, encryption_enabled=True,
                                         max_timeouts=0, request_timeout=10),
        )  # fmt: skip
        client.restore_login(account.user_id, account.device_id, account.token)
        return client

    def __enter__(self) -> Phone:
        self._syncer = asyncio.run_coroutine_threadsafe(self._sync_forever(), self._loop)
        return self

    def __exit__(self, *_: object) -> None:
        self._stopping = True
        if self._syncer is not None:
            self._loop.call_soon_threadsafe(self._syncer.cancel)
        self.run(self.client.close())

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    # --- syncing -------------------------------------------------------------------------------

    async def _sync_forever(self) -> None:
        while not self._stopping:
            try:
                answer = await self.client.sync(timeout=500)
            except Exception:  # the homeserver is away: the phone keeps trying, as apps do
                await asyncio.sleep(0.2)
                continue
            if not isinstance(answer, nio.SyncResponse):
                await asyncio.sleep(0.2)
                continue
            try:
                if self.client.should_upload_keys:
                    await self.client.keys_upload()
                if self.client.should_query_keys:
                    await self.client.keys_query()
                if self.client.should_claim_keys:
                    await self.client.keys_claim(self.client.get_users_for_key_claiming())
                await self.client.send_to_device_messages()
            except Exception:
                pass
            for joined in answer.rooms.join.values():
                for event in joined.timeline.events:
                    self._take(event)

    def _take(self, event: Any) -> None:
        encrypted = bool(getattr(event, "decrypted", False))
        content = event.source.get("content", {})
        if isinstance(event, nio.ReactionEvent):
            seen = Seen(event.event_id, event.sender, "reaction", content, encrypted)
        elif isinstance(event, nio.MegolmEvent):
            seen = Seen(event.event_id, event.sender, "undecrypted", content)
        elif isinstance(event, nio.RoomMessage):
            seen = Seen(event.event_id, event.sender, "message", content, encrypted)
        else:
            return
        with self._lock:
            self.seen.append(seen)

    # --- what a test does ---------------------------------------------------------------------

    def create_room(self, invite: list[str], encrypted: bool) -> str:
        state = [ENCRYPTION] if encrypted else []
        answer = self.run(self.client.room_create(invite=invite, initial_state=state))
        assert isinstance(answer, nio.RoomCreateResponse), answer
        room: str = answer.room_id
        self.wait(lambda: room in self.client.rooms or None, 10, "the room in the phone's sync")
        return room

    def join(self, room: str) -> None:
        answer = self.run(self.client.join(room))
        assert isinstance(answer, nio.JoinResponse), answer
        self.wait(lambda: room in self.client.rooms or None, 10, "the room joined")

    def wait_member(self, room: str, user: str, timeout: float = 20.0) -> None:
        def joined() -> bool | None:
            found = self.client.rooms.get(room)
            return (found is not None and user in found.users) or None

        self.wait(joined, timeout, f"{user} in {room}")

    def send(self, room: str, text: str, *, thread: str | None = None,
             reply_to: str | None = None) -> str:  # fmt: skip
        """An owner's message (in `thread`, answering `reply_to`); its event id."""
        content: dict[str, Any] = {"msgtype": "m.text", "body": text}
        if thread is not None:
            content["m.relates_to"] = {
                "rel_type": "m.thread",
                "event_id": thread,
                "is_falling_back": reply_to is None,
                "m.in_reply_to": {"event_id": reply_to or thread},
            }
        elif reply_to is not None:
            content["m.relates_to"] = {"m.in_reply_to": {"event_id": reply_to}}
        answer = self.run(
            self.client.room_send(room, "m.room.message", content, ignore_unverified_devices=True)
        )
        assert isinstance(answer, nio.RoomSendResponse), answer
        event_id: str = answer.event_id
        return event_id

    def send_in_the_clear(self, room: str, text: str) -> str:
        """A message sent unencrypted even where the room is encrypted (an app that does not
        encrypt, or someone posing as one); its event id."""
        content = {"msgtype": "m.text", "body": text}
        return self.run(self._send_raw(room, "m.room.message", content))

    def react(self, room: str, event_id: str, key: str) -> str:
        """A reaction, encrypted when the room is (as Element sends it); its event id."""
        content = {"m.relates_to": {"rel_type": "m.annotation", "event_id": event_id, "key": key}}
        return self.run(self._react(room, content))

    async def _react(self, room: str, content: dict[str, Any]) -> str:
        kind: str = "m.reaction"
        if self.client.rooms[room].encrypted:
            if not self.client.rooms[room].members_synced:
                await self.client.joined_members(room)
            if self.client.should_query_keys:
                await self.client.keys_query()
            if self.client.olm.should_share_group_session(room):
                await self.client.share_group_session(room, ignore_unverified_devices=True)
            kind, content = self.client.encrypt(room, "m.reaction", content)
        return await self._send_raw(room, kind, content)

    async def _send_raw(self, room: str, kind: str, content: dict[str, Any]) -> str:
        """`content` sent as it is (nio's `room_send` would encrypt it, or not a reaction)."""
        method, path, data = nio.Api.room_send(
            self.client.access_token, room, kind, content, str(uuid.uuid4())
        )
        answer = await self.client._send(nio.RoomSendResponse, method, path, data, (room,))
        assert isinstance(answer, nio.RoomSendResponse), answer
        event_id: str = answer.event_id
        return event_id

    # --- what the phone shows -----------------------------------------------------------------

    def posts_of(self, sender: str) -> list[Seen]:
        """`sender`'s messages, edits left out (see `text_of`)."""
        with self._lock:
            return [
                s for s in self.seen
                if s.sender == sender and s.kind == "message"
                and s.relates.get("rel_type") != "m.replace"
            ]  # fmt: skip

    def text_of(self, event_id: str) -> str:
        """A message's text as an app shows it: its newest edit's."""
        with self._lock:
            text = next(s.content.get("body", "") for s in self.seen if s.event_id == event_id)
            for s in self.seen:
                if (
                    s.relates.get("rel_type") == "m.replace"
                    and s.relates.get("event_id") == event_id
                ):
                    text = s.content.get("m.new_content", {}).get("body", text)
        return str(text)

    def wait_post(self, sender: str, wanted: Callable[[Seen, str], bool], timeout: float = 30.0,
                  what: str = "a post") -> Seen:  # fmt: skip
        """The first of `sender`'s posts whose newest text `wanted` accepts."""

        def found() -> Seen | None:
            for post in self.posts_of(sender):
                if wanted(post, self.text_of(post.event_id)):
                    return post
            return None

        return self.wait(found, timeout, what)

    def wait(self, check: Callable[[], T | None], timeout: float, what: str) -> T:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = check()
            if value is not None:
                return value
            time.sleep(0.05)
        texts = [(p.event_id[:8], self.text_of(p.event_id)[:200]) for p in self.posts_of_all()]
        raise TimeoutError(f"waited {timeout} s for {what}; the phone shows {texts}")

    def posts_of_all(self) -> list[Seen]:
        with self._lock:
            return [s for s in self.seen if s.kind == "message"
                    and s.relates.get("rel_type") != "m.replace"]  # fmt: skip
