"""The owner's phone (SPEC §21): gatewayd as a Matrix client (`matrix-nio`) in one room, end to
end encrypted. A shell: the homeserver's events are read by `intake.read`, and what it says to
do goes through the `Gateway` as the console's requests do (owner messages to loopd, verdicts
to brokerd's admin socket); turns and approvals are shown through `posts` and `outbox`.

It never decides who is heard (`intake` does) and nothing else in the box waits on it: a
homeserver that is away is tried again with backoff, the report says so, and gatewayd's
socket and console serve as before.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
from collections.abc import Hashable
from dataclasses import replace
from typing import Any

import aiohttp
import anyio
import nio  # type: ignore[import-untyped]

from bxcore.client import Client, ProtocolError, Unreachable
from bxcore.clock import now_ms, rfc3339
from bxcore.config_matrix import MatrixConfig
from bxcore.home import Home
from bxcore.ids import descends, parent_of_sub
from bxcore.matrix_report import Link, LinkState, Report, backoff_s
from bxcore.messages import (
    ApprovalInfo,
    ApprovalRequested,
    ApprovalSettled,
    ApprovalState,
    AskWhy,
    Cancel,
    Cancelled,
    Error,
    ErrorCode,
    LedgerQuery,
    LedgerStatus,
    OwnerMessage,
    SessionList,
    SessionsQuery,
    Settled,
    SupervisorReport,
    SupervisorStatus,
    Tokens,
    TokensQuery,
    TurnEvent,
    VerdictRequest,
    short,
)
from bxcore.visible import visible
from services.gatewayd.gateway import Gateway
from services.gatewayd.matrix import intake
from services.gatewayd.matrix.intake import Card, Incoming
from services.gatewayd.matrix.memo import Memo
from services.gatewayd.matrix.outbox import Outbox, Post, SendFailed
from services.gatewayd.matrix.posts import (
    TurnText,
    card_text,
    card_title,
    how_settled,
    settled_text,
)

log = logging.getLogger("gatewayd")

SYNC_WAIT_MS = 25_000  # a long poll of /sync
REQUEST_S = 40.0  # one request to the homeserver, a long poll included
NOT_ENCRYPTED = (
    "the room is not end-to-end encrypted and encrypted = true: nothing is sent or acted on"
)
RECONCILE_S = 2.0  # cards are checked against the pending list this often
#: What the homeserver being away raises through nio (aiohttp's errors, timeouts, sockets).
NETWORK = (aiohttp.ClientError, TimeoutError, asyncio.TimeoutError, OSError)


class Channel:
    def __init__(
        self,
        config: MatrixConfig,
        home: Home,
        gateway: Gateway,
        loop: Client,
        admin: Client,
        supervisor: Client,
        token: str | None,
    ) -> None:
        self.config = config
        self._home = home
        self._gateway = gateway
        self._loop = loop
        self._admin = admin
        self._supervisor = supervisor
        self._token = token
        self._owners = frozenset(config.owners)
        self._report = Report(home)
        self._outbox = Outbox()
        self._memo: Memo | None = None
        self._client: nio.AsyncClient | None = None
        self._turns: dict[tuple[str, int], TurnText] = {}
        self._by: dict[str, str] = {}  # approvals this channel settles: the owner's id
        self._infos: dict[str, ApprovalInfo] = {}  # approvals carded or to be, by id
        self._joined = False
        self._room_encrypted: bool | None = None
        self._state = LinkState.STARTING
        self._reason = ""
        self._since = rfc3339(now_ms())
        self._tag = secrets.token_hex(4)  # this process's transaction ids never meet another's
        self._synced = anyio.Event()

    def __repr__(self) -> str:
        return (
            f"Channel({self.config.user} in {self.config.room}: {self._state.value}, "
            f"{self._outbox!r}, {self._memo!r})"
        )

    # --- state -------------------------------------------------------------------------------

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

    async def run(self) -> None:
        """The channel until cancelled; it never raises for what the homeserver does."""
        self._set(LinkState.STARTING)
        if not self._token:
            self._set(LinkState.FAILED, f"the environment variable {self.config.token_env} "
                      "holding the box's access token is not set")  # fmt: skip
            return
        folder = self._home.ensure_matrix()
        store = folder / "store"
        store.mkdir(mode=0o700, exist_ok=True)
        self._memo = Memo(folder)
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
                tasks.start_soon(self._sync_forever, client)
                tasks.start_soon(self._outbox.run, self._send)
                tasks.start_soon(self._reconcile)
        finally:
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

    async def _sync_forever(self, client: nio.AsyncClient) -> None:
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
                failures = 0
                await self._took(client, answer)
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

    async def _took(self, client: nio.AsyncClient, answer: nio.SyncResponse) -> None:
        """One sync: keys kept current, the invite taken, then each new event of the room."""
        memo = self._memo
        assert memo is not None
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
        if not memo.synced:  # the room's past, before the box first listened: never acted on
            memo.synced = True
            memo.save()
            return
        for event in joined.timeline.events:
            await self._event(event)

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

    # --- the room's events -------------------------------------------------------------------

    async def _event(self, event: Any) -> None:
        memo = self._memo
        assert memo is not None
        if getattr(event, "sender", None) == self.config.user or not event.event_id:
            return
        if event.event_id in memo.acted:
            return  # taken before a restart, or again by a sync that was repeated
        incoming = _incoming(event)
        if incoming is None:
            memo.acted.put(event.event_id, None)
            memo.save()
            return
        action = intake.read(
            incoming,
            owners=self._owners,
            encrypted=self.config.encrypted,
            threads=memo.threads,
            cards=dict(memo.cards.items()),
        )
        session: str | None = None
        if isinstance(action, intake.ToSession):
            session = action.session or memo.new_session(action.thread)
        memo.acted.put(event.event_id, None)
        memo.save()  # before anything is done: a restart never does it twice
        await self._act(action, session, incoming)

    async def _act(self, action: intake.Action, session: str | None, event: Incoming) -> None:
        if isinstance(action, intake.Ignore):
            log.warning("matrix: not acted on: %s (event %s)", action.why, event.event_id)
        elif isinstance(action, intake.Say):
            self._say(action.text, action.thread, action.reply_to)
        elif isinstance(action, intake.ToSession):
            assert session is not None
            await self._owner_message(session, action)
        elif isinstance(action, intake.Stop):
            await self._stop(action.session, action.thread, action.reply_to)
        elif isinstance(action, intake.StopAll):
            await self._stop_all(action.thread, action.reply_to)
        elif isinstance(action, intake.Status):
            self._say(await self._status(), action.thread, action.reply_to)
        else:
            await self._verdict(action)

    def _say(self, text: str, thread: str | None, reply_to: str) -> None:
        self._outbox.want(("say", reply_to, text[:40]), text, thread=thread, reply_to=reply_to)

    async def _owner_message(self, session: str, action: intake.ToSession) -> None:
        answer = await self._gateway.owner_message(OwnerMessage(_rid(), session, action.text))
        if isinstance(answer, Error):
            self._say(f"The box did not take the message: {visible(answer.message)}",
                      action.thread, action.thread)  # fmt: skip

    async def _stop(self, session: str, thread: str | None, reply_to: str) -> None:
        answer = await self._gateway.cancel(Cancel(_rid(), session))
        if isinstance(answer, Cancelled):
            said = "Stopped." if answer.turn is not None else "Nothing was running."
        else:
            said = f"Could not stop: {visible(answer.message)}"
        self._say(said, thread, reply_to)

    async def _stop_all(self, thread: str | None, reply_to: str) -> None:
        """Every turn and every job run (the kill switch): each busy session stopped."""
        try:
            found = await self._loop.request(SessionsQuery(_rid()), timeout=5.0, tries=2)
        except (Unreachable, ProtocolError) as error:
            self._say(f"Could not stop: loopd: {error}", thread, reply_to)
            return
        if not isinstance(found, SessionList):
            self._say("Could not stop: loopd did not list its sessions.", thread, reply_to)
            return
        busy = [s.session for s in found.sessions if s.busy and parent_of_sub(s.session) is None]
        stopped = []
        for session in busy:
            answer = await self._gateway.cancel(Cancel(_rid(), session))
            if isinstance(answer, Cancelled):
                stopped.append(session)
        if not busy:
            self._say("Nothing was running.", thread, reply_to)
        else:
            names = ", ".join(visible(s) for s in stopped) or "none"
            self._say(f"Stopped {len(stopped)} of {len(busy)} running: {names}.", thread, reply_to)

    async def _status(self) -> str:
        lines = []
        try:
            report = await self._supervisor.request(SupervisorStatus(_rid()), timeout=1.5, tries=1)
        except (Unreachable, ProtocolError):
            report = None
        if isinstance(report, SupervisorReport):
            states = ", ".join(f"{s.name} {s.state.value}" for s in report.services)
            lines.append(f"services: {states}")
        else:
            lines.append("services: the supervisor does not answer")
        try:
            ledger = await self._admin.request(LedgerQuery(_rid()), timeout=3.0, tries=1)
        except (Unreachable, ProtocolError):
            ledger = None
        if isinstance(ledger, LedgerStatus):
            problem = f" ({visible(ledger.problem)})" if ledger.problem else ""
            lines.append(f"ledger: {ledger.state.value}, {ledger.seq} records{problem}")
        else:
            lines.append("ledger: brokerd does not answer")
        lines.append(f"pending approvals: {len(self._gateway.pending)}")
        try:
            tokens = await self._loop.request(TokensQuery(_rid()), timeout=3.0, tries=1)
        except (Unreachable, ProtocolError):
            tokens = None
        if isinstance(tokens, Tokens):
            cap = f" of {tokens.max_per_day}" if tokens.max_per_day else ""
            lines.append(f"tokens today: {tokens.tokens}{cap}")
        else:
            lines.append("tokens today: loopd does not answer")
        return "\n".join(lines)

    async def _verdict(self, action: intake.Verdict) -> None:
        memo = self._memo
        assert memo is not None
        self._by[action.approval] = action.owner
        by = f"owner (matrix {action.owner})"
        request = VerdictRequest(_rid(), action.approval, action.approve, action.scope, by)
        answer = await self._gateway.verdict(request)
        if isinstance(answer, Settled):
            self._settled(action.approval, how_settled(answer.state, action.owner))
            return
        self._by.pop(action.approval, None)
        if answer.code is ErrorCode.ALREADY_SETTLED:
            said = "Already settled: this changes nothing."
        elif answer.code is ErrorCode.UNKNOWN_APPROVAL:
            said = "This approval is no longer pending (expired or settled): this changes nothing."
        else:
            said = f"The verdict did not reach brokerd: {visible(answer.message)}"
        self._say(said, action.thread, action.reply_to)

    # --- loop-events and broker-events -------------------------------------------------------

    def take(self, message: object) -> None:
        """An event of loopd's or brokerd's stream, as gatewayd got it."""
        if self._memo is None:
            return
        if isinstance(message, TurnEvent):
            self._turn_event(message)
        elif isinstance(message, ApprovalRequested):
            self._card(message.approval)
        elif isinstance(message, ApprovalSettled):
            by = self._by.get(message.approval)
            self._settled(message.approval, how_settled(message.state, by))

    def _thread_of(self, session: str) -> str | None:
        memo = self._memo
        assert memo is not None
        for root, known in memo.threads.items():
            if descends(session, known):
                return root
        return None

    def _turn_event(self, event: TurnEvent) -> None:
        memo = self._memo
        assert memo is not None
        root = self._thread_of(event.session)  # a phone session's, or one of its sub-agents'
        if root is None:
            return
        key = (event.session, event.turn)
        turn = self._turns.get(key)
        if turn is None:
            sub = event.session not in memo.threads.values()
            heading = [f"sub-agent {visible(event.session)}:"] if sub else []
            turn = self._turns[key] = TurnText(event.session, event.turn, [heading])
            while len(self._turns) > 64:
                del self._turns[next(iter(self._turns))]
        for part in turn.take(event):
            text = turn.text(part)
            if text:
                self._outbox.want(("turn", *key, part), text, thread=root, reply_to=None)

    def _card(self, info: ApprovalInfo) -> None:
        memo = self._memo
        assert memo is not None
        if info.approval in self._infos or memo.card_of(info.approval) is not None:
            return
        self._infos[info.approval] = info
        thread = self._thread_of(info.session)
        title = card_title(info)

        def sent(event_id: str) -> None:
            scope = info.why is not AskWhy.UNTRUSTED  # §9: never session-wide for these
            memo.cards.put(event_id, Card(info.approval, thread, title, session_scope=scope))
            memo.save()

        self._outbox.want(("card", info.approval), card_text(info, now_ms()), thread=thread,
                          on_sent=sent)  # fmt: skip

    def _settled(self, approval: str, how: str) -> None:
        memo = self._memo
        assert memo is not None
        event = memo.card_of(approval)
        info = self._infos.get(approval)
        if event is not None:
            card = memo.cards[event]
            if card.settled is not None and (how.endswith("elsewhere") or card.settled == how):
                return  # said already; only who settled it may still be added
            memo.cards.put(event, replace(card, settled=how))
            memo.save()
            self._outbox.want(("card", approval), settled_text(card.title, how))
        elif info is not None:  # not sent yet: sent settled
            self._outbox.want(("card", approval), settled_text(card_title(info), how))

    async def _reconcile(self) -> None:
        """Now and then: a card for every pending approval, and every card whose approval is
        no longer pending said to be settled (an event brokerd sent while gatewayd was away)."""
        memo = self._memo
        assert memo is not None
        while True:
            await anyio.sleep(RECONCILE_S)
            if not self._gateway.pending_known:
                continue
            pending = dict(self._gateway.pending)
            for info in pending.values():
                self._card(info)
            for _event, card in list(memo.cards.items()):
                if card.settled is None and card.approval not in pending:
                    self._settled(card.approval, how_settled(ApprovalState.PENDING, None))

    # --- sending -----------------------------------------------------------------------------

    async def _send(self, post: Post) -> str:
        client = self._client
        assert client is not None
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
        raise SendFailed(f"the homeserver answered {getattr(answer, 'status_code', '?')}")


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
    content = event.source.get("content", {}) if isinstance(event.source, dict) else {}
    relates = content.get("m.relates_to") if isinstance(content, dict) else None
    relates = relates if isinstance(relates, dict) else {}
    if isinstance(event, nio.ReactionEvent):
        return Incoming(event.event_id, event.sender, encrypted, key=str(event.key),
                        reacts_to=str(event.reacts_to))  # fmt: skip
    if isinstance(event, nio.MegolmEvent):  # could not be decrypted
        return Incoming(event.event_id, event.sender, False)
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
        reply_to=str(reply_to) if isinstance(reply_to, str) else None,
    )  # fmt: skip


def _key_digest(key: Hashable) -> str:
    return hashlib.sha256(repr(key).encode()).hexdigest()[:16]


def _rid() -> str:
    return f"m-{secrets.token_hex(8)}"
