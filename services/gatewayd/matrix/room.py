"""The box's side of the Matrix room (SPEC §21.1), through `matrix-nio`: the access token's
device, the sync loop with its backoff, the keys end-to-end encryption needs, the owner's
invite, and sending. The boundary: nio's events become `intake.Incoming` here, nio's and
aiohttp's errors become `SendFailed` or the state `away`, and nothing past it sees nio.

It decides nothing about who is heard (`intake` does); it reports its state in
`{run}/matrix.json` (`bxcore.matrix_report`) as it changes.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Awaitable, Callable, Coroutine, Hashable
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import nio  # type: ignore[import-untyped]

from bxcore.clock import now_ms, rfc3339
from bxcore.config.matrix import MatrixConfig
from bxcore.matrix_report import Link, LinkState, Report, backoff_s
from bxcore.wire.messages import short
from services.gatewayd.matrix.intake import Incoming
from services.gatewayd.matrix.outbox import Post, Refused, SendFailed

log = logging.getLogger("gatewayd")

SYNC_WAIT_MS = 25_000  # a long poll of /sync
REQUEST_S = 40.0  # one request to the homeserver, a long poll included
#: What the homeserver being away raises through nio (aiohttp's errors, timeouts, sockets).
NETWORK = (aiohttp.ClientError, TimeoutError, OSError)  # asyncio's TimeoutError is TimeoutError
NOT_ENCRYPTED = (
    "the room is not end-to-end encrypted and encrypted = true: nothing is sent or acted on"
)
#: What the homeserver says of a post it will never take as it is (others are tried again).
REFUSALS = frozenset({"M_TOO_LARGE", "M_BAD_JSON", "M_NOT_JSON", "M_FORBIDDEN", "M_INVALID_PARAM"})
Take = Callable[[list[Incoming]], Awaitable[None]]


class Room:
    """One room of one homeserver, as the box's account. `take(events)` is given each sync's
    new events of the room (the first time, its recent past)."""

    def __init__(self, config: MatrixConfig, report: Report, token: str | None) -> None:
        self.config = config
        self._report = report
        self._token = token
        self._owners = frozenset(config.owners)
        self._client: Any = None
        self._joined = False
        self._room_encrypted: bool | None = None
        self._state = LinkState.STARTING
        self._reason = ""
        self._since = rfc3339(now_ms())
        self._tag = secrets.token_hex(4)  # this process's transaction ids never meet another's
        self._synced = anyio.Event()

    def __repr__(self) -> str:
        return f"Room({self.config.user} in {self.config.room}: {self._state.value})"

    @property
    def state(self) -> LinkState:
        return self._state

    def _set(self, state: LinkState, reason: str = "") -> None:
        if (state, reason) != (self._state, self._reason):
            if state is not self._state:
                self._since = rfc3339(now_ms())
            if state is LinkState.SYNCING:
                log.info("matrix: syncing as %s", self.config.user)
            else:
                log.warning("matrix: %s: %s", state.value, reason)
        self._state, self._reason = state, reason
        self._report.set(
            Link(state, self._since, self.config.user, self.config.room, reason,
                 self._joined, self._room_encrypted)
        )  # fmt: skip

    # --- running -----------------------------------------------------------------------------

    def fail(self, reason: str) -> None:
        """The channel cannot go on (a fault of its own): said, and left so."""
        self._set(LinkState.FAILED, short(reason))

    async def run(
        self, store: Path, take: Take, beside: Callable[[], Coroutine[Any, Any, None]]
    ) -> None:
        """The room until cancelled; it never raises for what the homeserver does. `beside`
        runs beside the sync loop once the token is known good (the outbox, say)."""
        self._set(LinkState.STARTING)
        if not self._token:
            self._set(LinkState.FAILED, f"the environment variable {self.config.token_env} "
                      "holding the box's access token is not set")  # fmt: skip
            return
        client = nio.AsyncClient(
            self.config.homeserver,
            self.config.user,
            store_path=str(store),
            config=nio.AsyncClientConfig(
                store_sync_tokens=True,
                encryption_enabled=True,
                max_timeouts=0,  # our own loop tries again, and says so
                max_limit_exceeded=None,
                request_timeout=REQUEST_S,
            ),
        )
        self._client = client
        try:
            device = await self._whoami(client)
            if device is None:
                return
            client.restore_login(self.config.user, device, self._token)
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._sync_forever, client, take)
                tasks.start_soon(beside)
        finally:
            self._report.clear()  # gatewayd stopping: no report left to be taken for the truth
            with anyio.CancelScope(shield=True):
                await client.close()

    async def _whoami(self, client: nio.AsyncClient) -> str | None:
        """The token's device, once the homeserver answers; None when the token is not the
        box's account's (the channel then stays failed)."""
        client.access_token = self._token or ""
        failures = 0
        while True:
            try:
                answer = await client.whoami()
            except NETWORK as error:
                answer = None
                why = f"the homeserver does not answer: {error or type(error).__name__}"
            if isinstance(answer, nio.WhoamiResponse):
                if answer.user_id != self.config.user:
                    self._set(LinkState.FAILED, f"the access token is {answer.user_id}'s, "
                              f"not {self.config.user}'s")  # fmt: skip
                    return None
                if not answer.device_id:
                    self._set(LinkState.FAILED, "the access token has no device")
                    return None
                return str(answer.device_id)
            if isinstance(answer, nio.WhoamiError):
                if answer.status_code == "M_UNKNOWN_TOKEN":
                    self._set(LinkState.FAILED, "the homeserver does not know the access "
                              f"token in {self.config.token_env}")  # fmt: skip
                    return None
                why = f"the homeserver answered {answer.status_code}: {answer.message}"
            failures += 1
            self._set(LinkState.AWAY, short(why))
            await anyio.sleep(backoff_s(failures))

    async def _sync_forever(self, client: nio.AsyncClient, take: Take) -> None:
        failures = 0
        while True:
            try:
                answer = await client.sync(
                    timeout=SYNC_WAIT_MS, full_state=not self._synced.is_set()
                )
            except NETWORK as error:
                answer = None
                why = f"the homeserver does not answer: {error or type(error).__name__}"
            if isinstance(answer, nio.SyncResponse):
                try:
                    await self._took(client, answer, take)
                except NETWORK as error:  # a join, say, cut off: the next sync tries again
                    why = f"the homeserver went away: {error or type(error).__name__}"
                else:
                    failures = 0
                    continue
            if isinstance(answer, nio.ErrorResponse):
                if answer.status_code == "M_UNKNOWN_TOKEN":
                    self._set(LinkState.FAILED, "the homeserver no longer knows the access "
                              f"token in {self.config.token_env}")  # fmt: skip
                    return
                why = f"the homeserver answered {answer.status_code}: {answer.message}"
            failures += 1
            self._set(LinkState.AWAY, short(why))
            await anyio.sleep(backoff_s(failures))

    async def _took(self, client: nio.AsyncClient, answer: nio.SyncResponse, take: Take) -> None:
        """One sync: keys kept current, the invite taken, then each new event of the room."""
        await self._keys(client)
        room_id = self.config.room
        if room_id in answer.rooms.invite and room_id not in client.rooms:
            await self._maybe_join(client, answer.rooms.invite[room_id])
        room = client.rooms.get(room_id)
        self._joined = room is not None
        self._room_encrypted = None if room is None else bool(room.encrypted)
        refused = self.config.encrypted and self._room_encrypted is False
        self._set(LinkState.SYNCING, NOT_ENCRYPTED if refused else "")
        self._synced.set()
        joined = answer.rooms.join.get(room_id)
        if joined is None:
            return
        events = []
        for event in joined.timeline.events:
            if getattr(event, "sender", None) == self.config.user:
                continue  # the box's own
            incoming = _incoming(event)
            if incoming is not None and incoming.event_id:
                events.append(incoming)
        await take(events)

    async def _keys(self, client: nio.AsyncClient) -> None:
        """What nio's own sync loop does between syncs: the box's keys uploaded, the owners'
        devices queried, sessions claimed, and the keys owed sent."""
        try:
            if client.should_upload_keys:
                await client.keys_upload()
            if client.should_query_keys:
                await client.keys_query()
            if client.should_claim_keys:
                await client.keys_claim(client.get_users_for_key_claiming())
            await client.send_to_device_messages()
        except NETWORK as error:
            log.info("matrix: keys not exchanged now (%s); at the next sync", error)

    async def _maybe_join(self, client: nio.AsyncClient, invite: Any) -> None:
        inviter = None
        for event in invite.invite_state:
            if (
                getattr(event, "state_key", None) == self.config.user
                and getattr(event, "membership", None) == "invite"
            ):
                inviter = event.sender
        if inviter not in self._owners:
            log.warning("matrix: invited to %s by %s, who is not an owner: not joined",
                        self.config.room, inviter)  # fmt: skip
            return
        answer = await client.join(self.config.room)
        if isinstance(answer, nio.JoinError):
            log.warning("matrix: could not join %s: %s", self.config.room, answer.message)

    # --- sending -----------------------------------------------------------------------------

    async def offer(self, event_id: str, keys: list[str]) -> None:
        """The box's own reactions under a card, so the owner's app offers them to tap; best
        effort (a card takes the owner's reactions whether or not these are there)."""
        client = self._client
        if client is None:
            return
        for key in keys:
            content = {"m.relates_to": {"rel_type": "m.annotation", "event_id": event_id,
                                        "key": key}}  # fmt: skip
            try:
                await client.room_send(self.config.room, "m.reaction", content,
                                       ignore_unverified_devices=True)  # fmt: skip
            except NETWORK as error:
                log.info("matrix: a card's reactions not offered (%s)", error)
                return

    async def send(self, post: Post) -> str:
        """`post` sent, or edited; its event id (`SendFailed`: tried again later)."""
        client = self._client
        if client is None:
            raise SendFailed("the channel is not connected")
        await self._synced.wait()
        room = client.rooms.get(self.config.room)
        if room is None:
            raise SendFailed(f"the box has not joined {self.config.room}")
        if self.config.encrypted and not room.encrypted:
            raise SendFailed(f"{self.config.room} is not encrypted and encrypted = true")
        content = _content(post)
        try:
            answer = await client.room_send(
                self.config.room, "m.room.message", content,
                tx_id=f"bx-{self._tag}-{_key_digest(post.key)}-{post.version}",
                ignore_unverified_devices=True,
            )  # fmt: skip
        except NETWORK as error:
            raise SendFailed(f"the homeserver does not answer: {error}") from None
        except Exception as error:  # nio's encryption errors: tried again after a sync
            raise SendFailed(f"{type(error).__name__}: {error}") from None
        if isinstance(answer, nio.RoomSendResponse):
            return str(answer.event_id)
        code = getattr(answer, "status_code", None)
        why = f"the homeserver answered {code}: {getattr(answer, 'message', '')}"
        if code in REFUSALS:
            raise Refused(why)
        raise SendFailed(why)


def _content(post: Post) -> dict[str, Any]:
    """A new message in its thread, or an edit of the post already sent; plain text only."""
    if post.event_id is not None:
        return {
            "msgtype": "m.notice",
            "body": f"* {post.text}",
            "m.new_content": {"msgtype": "m.notice", "body": post.text},
            "m.relates_to": {"rel_type": "m.replace", "event_id": post.event_id},
        }
    content: dict[str, Any] = {"msgtype": "m.notice", "body": post.text}
    if post.thread is not None:
        content["m.relates_to"] = {
            "rel_type": "m.thread",
            "event_id": post.thread,
            "is_falling_back": post.reply_to is None,
            "m.in_reply_to": {"event_id": post.reply_to or post.thread},
        }
    elif post.reply_to is not None:
        content["m.relates_to"] = {"m.in_reply_to": {"event_id": post.reply_to}}
    return content


def _incoming(event: Any) -> Incoming | None:
    """A text message or a reaction of the room, as `intake` reads it; None for anything
    else (state, edits, notices)."""
    encrypted = bool(getattr(event, "decrypted", False))
    at_ms = int(getattr(event, "server_timestamp", 0) or 0)
    content = event.source.get("content", {}) if isinstance(event.source, dict) else {}
    relates = content.get("m.relates_to") if isinstance(content, dict) else None
    relates = relates if isinstance(relates, dict) else {}
    if isinstance(event, nio.ReactionEvent):
        return Incoming(event.event_id, event.sender, encrypted, key=str(event.key),
                        reacts_to=str(event.reacts_to), at_ms=at_ms)  # fmt: skip
    if isinstance(event, nio.MegolmEvent):  # could not be decrypted
        thread = relates.get("event_id") if relates.get("rel_type") == "m.thread" else None
        return Incoming(event.event_id, event.sender, False, at_ms=at_ms, undecrypted=True,
                        thread=thread if isinstance(thread, str) else None)  # fmt: skip
    if not isinstance(event, nio.RoomMessageText):
        return None
    if relates.get("rel_type") == "m.replace":
        return None  # an owner's edit is not a new message
    thread = relates.get("event_id") if relates.get("rel_type") == "m.thread" else None
    reply = relates.get("m.in_reply_to")
    reply_to = reply.get("event_id") if isinstance(reply, dict) else None
    if thread is not None and relates.get("is_falling_back", False):
        reply_to = None
    return Incoming(
        event.event_id, event.sender, encrypted, body=str(event.body),
        thread=str(thread) if isinstance(thread, str) else None,
        reply_to=str(reply_to) if isinstance(reply_to, str) else None, at_ms=at_ms,
    )  # fmt: skip


def _key_digest(key: Hashable) -> str:
    return hashlib.sha256(repr(key).encode()).hexdigest()[:16]
