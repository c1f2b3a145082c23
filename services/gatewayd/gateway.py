"""The `gateway` socket's answers (SPEC §12): what `bxctl chat` asks of the owner's side.

Owner messages go to loopd; verdicts and the pending list to brokerd's admin socket. Events
come from a window per session, fed by loopd's history and `loop-events`; pending approvals
from brokerd's list, kept current by `broker-events`. gatewayd holds no owner key and decides
nothing: it relays a verdict only when the owner's authenticated client sent one.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from dataclasses import replace

import anyio
from anyio.abc import TaskGroup

from bxcore.bounded import Bounded
from bxcore.client import AskFailed, Client
from bxcore.ids import descends, parent_of_sub
from bxcore.once import Once
from bxcore.routes import Refusal, Route, Routes
from bxcore.wire import codec as wire
from bxcore.wire.codec import MAX_MESSAGE
from bxcore.wire.messages import (
    Accepted,
    ApprovalInfo,
    ApprovalRequested,
    ApprovalSettled,
    Cancel,
    Cancelled,
    Error,
    ErrorCode,
    Events,
    EventsQuery,
    History,
    HistoryQuery,
    LedgerHead,
    OwnerMessage,
    PendingList,
    PendingQuery,
    Scope,
    Settled,
    ToolPending,
    TurnEvent,
    VerdictRequest,
    short,
)
from bxcore.wire.sockets import GatewayAnswer, GatewayRequest
from services.gatewayd.heads import HeadKeeper
from services.gatewayd.window import Took, Windows

log = logging.getLogger("gatewayd")

RECHECK_S = 2.0  # a quiet long poll asks loopd this often, in case the stream dropped events
PENDING_REFRESH_S = 5.0  # brokerd's pending list is re-read this often, for the same reason
EVENTS_BUDGET = MAX_MESSAGE // 4
PENDING_BUDGET = MAX_MESSAGE // 4
SETTLED_KEPT = 4096
STOPPED_KEPT = 256  # sessions stopped lately, whose late approvals are denied as they come
ANSWERS_KEPT = 1024  # of owner messages, and of verdicts
REFUSAL = Refusal("the gateway socket does not take {type}")
CANCELLED_BY = "owner (turn cancelled)"  # who denied the approvals of a stopped turn (§12.2)


class Unavailable(Exception):
    """loopd or brokerd did not answer as it should; the text says which and why."""


class Gateway:
    def __init__(self, loop: Client, history: Client, admin: Client, heads: HeadKeeper) -> None:
        self._loop = loop  # owner messages, never retried: loopd would run a repeat twice
        self._history = history
        self._admin = admin
        self.heads = heads
        self.windows = Windows()
        self.pending: dict[str, ApprovalInfo] = {}
        self._settled: Bounded[str, None] = Bounded(SETTLED_KEPT)
        self._stopped: Bounded[str, None] = Bounded(STOPPED_KEPT)  # no owner message since
        self._changed = anyio.Event()
        # Idempotent per request (§3.1), keyed by the whole request: a client's retry gets the
        # first answer, never a second owner message or verdict upstream.
        self._owner_messages: Once[bytes, Accepted | Error] = Once(Bounded(ANSWERS_KEPT), keep=kept)
        self._verdicts: Once[bytes, Settled | Error] = Once(Bounded(ANSWERS_KEPT), keep=kept)
        self._requested_meanwhile: list[ApprovalInfo] | None = None
        self._refresh_lock = anyio.Lock()
        self._refresh_wanted = False
        self._brokerd_ok = True
        self._pending_known = False  # until brokerd's list has been read once
        self._tasks: TaskGroup | None = None
        self.routes: Routes[GatewayAnswer] = Routes(
            GatewayRequest,
            REFUSAL,
            Route(EventsQuery, self.events_query),
            Route(OwnerMessage, self.owner_message),
            Route(VerdictRequest, self.verdict),
            Route(PendingQuery, self.pending_query),
            Route(Cancel, self.cancel),
        )

    def __repr__(self) -> str:
        return f"Gateway({len(self.pending)} pending, {self.windows!r}, {self.heads!r})"

    @property
    def pending_known(self) -> bool:
        """Whether brokerd's pending list has been read at least once."""
        return self._pending_known

    # --- the gateway socket ------------------------------------------------------------------

    async def owner_message(self, message: OwnerMessage) -> Accepted | Error:
        return await self._owner_messages.answer(
            wire.encode(message), lambda: self._owner_message(message)
        )

    async def verdict(self, message: VerdictRequest) -> Settled | Error:
        return await self._verdicts.answer(wire.encode(message), lambda: self._verdict(message))

    async def _owner_message(self, message: OwnerMessage) -> Accepted | Error:
        upstream = replace(message, id=_rid())
        try:
            answer = await self._loop.ask(upstream)
        except AskFailed as error:
            return Error(message.id, ErrorCode.UNAVAILABLE, short(f"loopd: {error}"))
        if isinstance(answer, Accepted):
            self._stopped.pop(message.session)  # the owner speaks again: its calls are asked
        return replace(answer, id=message.id)

    async def _verdict(self, message: VerdictRequest) -> Settled | Error:
        by = short(f"{message.by} via gatewayd")
        upstream = replace(message, id=_rid(), by=by)
        try:
            answer = await self._admin.ask(upstream)
        except AskFailed as error:
            return Error(message.id, ErrorCode.UNAVAILABLE, short(f"brokerd: {error}"))
        gone = (ErrorCode.ALREADY_SETTLED, ErrorCode.UNKNOWN_APPROVAL)
        if isinstance(answer, Settled) or answer.code in gone:
            self._settle(message.approval)
        return replace(answer, id=message.id)

    async def cancel(self, message: Cancel) -> Cancelled | Error:
        """Stop: loopd ends the session's running turn (and its sub-agents'), then every
        approval pending for them is denied, recorded `by` "owner (turn cancelled)" (§12.2).
        loopd gets an id made from the request, so a retry gets its first answer."""
        digest = hashlib.sha256(wire.encode(message)).hexdigest()[:24]
        upstream = replace(message, id=f"g-cancel-{digest}")
        try:
            answer = await self._loop.ask(upstream)
        except AskFailed as error:
            return Error(message.id, ErrorCode.UNAVAILABLE, short(f"loopd: {error}"))
        if isinstance(answer, Error):
            return replace(answer, id=message.id)
        # Until the owner speaks in it again, an approval brokerd announces late for this
        # session (a call that was on its way when the turn stopped) is denied as it comes.
        self._stopped.put(message.session, None)
        await self._refresh_quietly()  # an approval asked just before the turn stopped
        for info in [a for a in self.pending.values() if descends(a.session, message.session)]:
            await self._deny_stopped(info)
        return replace(answer, id=message.id)

    def _of_stopped_turn(self, session: str | None) -> bool:
        """Whether `session` or one of its ancestors was stopped, with no owner message since."""
        while session is not None:
            if session in self._stopped:
                return True
            session = parent_of_sub(session)
        return False

    async def _deny_stopped(self, info: ApprovalInfo) -> None:
        denial = VerdictRequest(_rid(), info.approval, False, Scope.ONCE, CANCELLED_BY)
        try:
            settled = await self._admin.ask(denial)
        except AskFailed as error:
            log.warning("could not deny %s of a stopped turn: %s", info.approval, error)
            return
        gone = (ErrorCode.ALREADY_SETTLED, ErrorCode.UNKNOWN_APPROVAL)
        if isinstance(settled, Settled) or settled.code in gone:
            self._settle(info.approval)
        else:
            log.warning("brokerd did not deny %s of a stopped turn: %s", info.approval, settled)

    async def pending_query(self, message: PendingQuery) -> PendingList | Error:
        try:
            answer = await self._fetch_pending()
        except Unavailable as error:
            return Error(message.id, ErrorCode.UNAVAILABLE, short(str(error)))
        return replace(answer, id=message.id)

    # --- events ------------------------------------------------------------------------------

    async def events_query(self, query: EventsQuery) -> Events | Error:
        """Events after `query.after` as soon as there are any, else when `wait_ms` passes;
        with the approvals pending for the session (and its sub-agents) now."""
        deadline = anyio.current_time() + query.wait_ms / 1000
        before = self._pending_ids(query.session)
        recheck = False
        while True:
            changed = self._changed
            try:
                events, more = await self._read(query.session, query.after, recheck)
            except Unavailable as error:
                return Error(query.id, ErrorCode.UNAVAILABLE, short(str(error)))
            left = deadline - anyio.current_time()
            if events or more or left <= 0 or self._pending_ids(query.session) != before:
                return await self._answer(query, events, more)
            with anyio.move_on_after(min(RECHECK_S, left)) as quiet:
                await changed.wait()
            recheck = quiet.cancelled_caught

    async def _read(
        self, session: str, after: int, recheck: bool
    ) -> tuple[tuple[TurnEvent, ...], bool]:
        window = self.windows.get(session)
        if not window.covers(after):
            page = await self._history_page(session, after)
            if window.base is None:  # still empty: the stream gave nothing meanwhile
                window.start(after, page.events, complete=not page.more)
                self.windows.trim(window)
            return page.events, page.more  # older than the window holds: loopd's own page
        behind = False  # loopd holds more than this answer can bring: ask again at once
        if window.stale or recheck:
            last, gaps = window.last, window.gaps
            assert last is not None
            try:
                page = await self._history_page(session, last)
            except Unavailable:
                if not recheck:
                    raise
                log.info("loopd did not answer a re-check of %s; trying again", session)
            else:
                gap = any(window.take(event) is Took.GAP for event in page.events)
                self.windows.trim(window)
                window.stale = behind = gap or page.more or window.gaps != gaps
        events, more = window.after(after, EVENTS_BUDGET)
        return events, more or behind

    async def _history_page(self, session: str, after: int) -> History:
        try:
            answer = await self._history.ask(HistoryQuery(_rid(), session, after))
        except AskFailed as error:
            raise Unavailable(f"loopd: {error}") from None
        if isinstance(answer, Error):
            raise Unavailable(f"loopd refused the history query: {answer.message}")
        return answer

    async def _answer(
        self, query: EventsQuery, events: tuple[TurnEvent, ...], more: bool
    ) -> Events:
        unsure = not self._pending_known or any(
            isinstance(e.event, ToolPending) and self._unknown(e.event.approval) for e in events
        )
        if unsure and self._brokerd_ok:  # when brokerd is down, answer with what is known
            await self._refresh_quietly()  # brokerd's event may be behind loopd's, or lost
        return Events(query.id, query.session, events, self._pending_for(query.session), more)

    def _pending_for(self, session: str) -> tuple[ApprovalInfo, ...]:
        """The session's pending approvals and its sub-agents', oldest first, as many as fit."""
        found = sorted(
            (a for a in self.pending.values() if descends(a.session, session)),
            key=lambda a: a.requested,
        )
        kept: list[ApprovalInfo] = []
        size = 0
        for info in found:
            size += len(wire.encode(ApprovalRequested(info)))
            if size > PENDING_BUDGET:
                break
            kept.append(info)
        return tuple(kept)

    def _pending_ids(self, session: str) -> frozenset[str]:
        return frozenset(a.approval for a in self.pending.values() if descends(a.session, session))

    def _unknown(self, approval: str) -> bool:
        return approval not in self.pending and approval not in self._settled

    # --- the streams -------------------------------------------------------------------------

    def on_loop_event(self, message: object) -> None:
        if not isinstance(message, TurnEvent):
            return
        window = self.windows.get(message.session)
        window.take(message)
        self.windows.trim(window)
        if isinstance(message.event, ToolPending) and self._unknown(message.event.approval):
            self._want_refresh()
        self._notify()

    async def on_loop_connect(self) -> None:
        """loopd is (back): nothing held is known to be the newest until re-read from it."""
        self.windows.all_stale()
        self._notify()

    def on_broker_event(self, message: object) -> None:
        if isinstance(message, ApprovalRequested):
            info = message.approval
            if self._requested_meanwhile is not None:
                self._requested_meanwhile.append(info)
            if info.approval not in self._settled:
                self.pending[info.approval] = info
                self._notify()
                if self._tasks is not None and self._of_stopped_turn(info.session):
                    self._tasks.start_soon(self._deny_stopped, info)
        elif isinstance(message, ApprovalSettled):
            self._settle(message.approval)
        elif isinstance(message, LedgerHead):
            self.heads.saw(message)

    async def on_broker_connect(self) -> None:
        await self._refresh_quietly()

    # --- the pending approvals ---------------------------------------------------------------

    async def run(self) -> None:
        """Re-read brokerd's pending list now and then, until cancelled."""
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            while True:
                await anyio.sleep(PENDING_REFRESH_S)
                await self._refresh_quietly()

    def _want_refresh(self) -> None:
        if self._tasks is not None and not self._refresh_wanted:
            self._refresh_wanted = True
            self._tasks.start_soon(self._refresh_quietly)

    async def _refresh_quietly(self) -> None:
        self._refresh_wanted = False
        try:
            await self._fetch_pending()
        except Unavailable as error:
            if self._brokerd_ok:
                log.warning("cannot read the pending approvals: %s", error)
            self._brokerd_ok = False
            return
        if not self._brokerd_ok:
            log.info("brokerd answers again; pending approvals re-read")
        self._brokerd_ok = True

    async def _fetch_pending(self) -> PendingList:
        """brokerd's pending list, which becomes ours (with what was announced meanwhile)."""
        async with self._refresh_lock:
            self._requested_meanwhile = []
            try:
                answer = await self._admin.ask(PendingQuery(_rid()))
            except AskFailed as error:
                raise Unavailable(f"brokerd: {error}") from None
            finally:
                meanwhile, self._requested_meanwhile = self._requested_meanwhile, None
            if isinstance(answer, Error):
                raise Unavailable(f"brokerd refused pending_query: {answer.message}")
            fresh = {a.approval: a for a in (*answer.approvals, *meanwhile)}
            fresh = {key: a for key, a in fresh.items() if key not in self._settled}
            self._pending_known = True
            if fresh.keys() != self.pending.keys():
                self.pending = fresh
                self._notify()
            else:
                self.pending = fresh
            return answer

    def _settle(self, approval: str) -> None:
        self.pending.pop(approval, None)
        self._settled.put(approval, None)
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()


def kept(answer: Accepted | Settled | Error) -> bool:
    """Whether a retry may get `answer` again: not when loopd or brokerd did not answer."""
    return not (isinstance(answer, Error) and answer.code is ErrorCode.UNAVAILABLE)


def _rid() -> str:
    return f"g-{secrets.token_hex(8)}"
