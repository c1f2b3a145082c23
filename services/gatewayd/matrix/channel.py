"""The owner's phone (SPEC §21): what gatewayd does for the Matrix room (`room`). A shell: the
room's events are read by `intake.read`, and what it says to do goes through the `Gateway` as
the console's requests do (owner messages to loopd, verdicts to brokerd's admin socket); turns
and approvals are shown through `posts` and `outbox`; `memo` keeps what must outlive a crash.

It never decides who is heard (`intake` does) and nothing else in the box waits on it: a
homeserver that is away is tried again with backoff, the report says so, and gatewayd's
socket and console serve as before.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import replace

import anyio
from anyio.abc import TaskGroup

from bxcore.client import AskFailed, Client
from bxcore.clock import now_ms
from bxcore.config.matrix import MatrixConfig
from bxcore.home.layout import Home
from bxcore.ids import parent_of_sub
from bxcore.matrix_report import Report
from bxcore.visible import visible
from bxcore.wire.common import A, Asks
from bxcore.wire.messages import (
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
    SessionsQuery,
    Settled,
    SupervisorReport,
    SupervisorStatus,
    Tokens,
    TokensQuery,
    TurnEvent,
    VerdictRequest,
)
from services.gatewayd.gateway import Gateway
from services.gatewayd.matrix import intake
from services.gatewayd.matrix.intake import Card, Incoming
from services.gatewayd.matrix.memo import Memo
from services.gatewayd.matrix.outbox import Outbox
from services.gatewayd.matrix.posts import (
    card_text,
    card_title,
    how_settled,
    settled_text,
)
from services.gatewayd.matrix.room import Room
from services.gatewayd.matrix.turns import Turns

log = logging.getLogger("gatewayd")

RECONCILE_S = 2.0  # cards are checked against the pending list this often


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
        self._owners = frozenset(config.owners)
        self._room = Room(config, Report(home), token)
        self._outbox = Outbox()
        self._memo: Memo | None = None
        self._turns: Turns | None = None
        self._tasks: TaskGroup | None = None  # commands and verdicts, beside the sync loop
        self._by: dict[str, str] = {}  # approvals this channel settles: the owner's id
        self._infos: dict[str, ApprovalInfo] = {}  # approvals carded or to be, by id

    def __repr__(self) -> str:
        return f"Channel({self._room!r}, {self._outbox!r}, {self._memo!r})"

    # --- running -----------------------------------------------------------------------------

    async def run(self) -> None:
        """The channel until cancelled; it never raises for what the homeserver does."""
        try:
            folder = self._home.ensure_matrix()
            store = folder / "store"
            store.mkdir(mode=0o700, exist_ok=True)
            self._memo = Memo(folder)
            self._turns = Turns(self._memo, self._outbox, self._loop)
            async with anyio.create_task_group() as tasks:
                self._tasks = tasks
                tasks.start_soon(self._turns.resume)
                tasks.start_soon(self._room.run, store, self._take, self._send_and_reconcile)
        except Exception as error:  # the box goes on without its phone, and says why
            log.exception("matrix: the channel stopped")
            self._room.fail(f"the channel stopped: {type(error).__name__}: {error}")

    async def _send_and_reconcile(self) -> None:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._outbox.run, self._room.send)
            tasks.start_soon(self._reconcile)

    # --- the room's events -------------------------------------------------------------------

    async def _take(self, events: list[Incoming]) -> None:
        """One sync's new events of the room, in order."""
        memo = self._memo
        assert memo is not None
        for event in events:
            await self._event(event)

    async def _event(self, incoming: Incoming) -> None:
        memo = self._memo
        assert memo is not None
        if incoming.event_id in memo.acted:
            return  # taken before a restart, or again by a sync that was repeated
        if incoming.at_ms < memo.since_ms:
            return  # the room's past, from before the box first listened: never acted on
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
        memo.acted.put(incoming.event_id, None)
        memo.save()  # before anything is done: a restart never does it twice
        await self._act(action, session, incoming)

    async def _act(self, action: intake.Action, session: str | None, event: Incoming) -> None:
        """Owner messages in order, here; what may take a while (a stop waits for its turn to
        end) beside the sync loop, so the next event is not held up."""
        tasks = self._tasks
        assert tasks is not None
        if isinstance(action, intake.Ignore):
            log.warning("matrix: not acted on: %s (event %s)", action.why, event.event_id)
        elif isinstance(action, intake.Say):
            self._say(action.text, action.thread, action.reply_to)
        elif isinstance(action, intake.ToSession):
            assert session is not None
            await self._owner_message(session, action)
        elif isinstance(action, intake.Stop):
            tasks.start_soon(self._stop, action.session, action.thread, action.reply_to)
        elif isinstance(action, intake.StopAll):
            tasks.start_soon(self._stop_all, action.thread, action.reply_to)
        elif isinstance(action, intake.Status):
            tasks.start_soon(self._answer_status, action.thread, action.reply_to)
        else:
            tasks.start_soon(self._verdict, action)

    async def _answer_status(self, thread: str | None, reply_to: str) -> None:
        self._say(await self._status(), thread, reply_to)

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
            found = await self._loop.ask(SessionsQuery(_rid()))
        except AskFailed as error:
            self._say(f"Could not stop: loopd: {error}", thread, reply_to)
            return
        if isinstance(found, Error):
            self._say(f"Could not stop: loopd: {visible(found.message)}", thread, reply_to)
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
        report = await _asked(self._supervisor, SupervisorStatus(_rid()))
        if isinstance(report, SupervisorReport):
            states = ", ".join(f"{s.name} {s.state.value}" for s in report.services)
            lines.append(f"services: {states}")
        else:
            lines.append("services: the supervisor does not answer")
        ledger = await _asked(self._admin, LedgerQuery(_rid()))
        if isinstance(ledger, LedgerStatus):
            problem = f" ({visible(ledger.problem)})" if ledger.problem else ""
            lines.append(f"ledger: {ledger.state.value}, {ledger.seq} records{problem}")
        else:
            lines.append("ledger: brokerd does not answer")
        lines.append(f"pending approvals: {len(self._gateway.pending)}")
        tokens = await _asked(self._loop, TokensQuery(_rid()))
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
        if self._memo is None or self._turns is None:
            return
        if isinstance(message, TurnEvent):
            self._turns.take(message)
        elif isinstance(message, ApprovalRequested):
            self._card(message.approval)
        elif isinstance(message, ApprovalSettled):
            by = self._by.get(message.approval)
            self._settled(message.approval, how_settled(message.state, by))

    def _thread_of(self, session: str) -> str | None:
        assert self._turns is not None
        return self._turns.thread_of(session)

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
            keys = [intake.APPROVE_ONCE, *([intake.APPROVE_SESSION] if scope else []), intake.DENY]
            if self._tasks is not None:  # offered: the owner taps one under the card
                self._tasks.start_soon(self._room.offer, event_id, keys)

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


def _rid() -> str:
    return f"m-{secrets.token_hex(8)}"


async def _asked(client: Client, request: Asks[A]) -> A | Error | None:
    """`client`'s answer to `request`; None when the daemon cannot be asked (for `status`)."""
    try:
        return await client.ask(request)
    except AskFailed:
        return None
