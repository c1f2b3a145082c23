"""The approval desk (SPEC §9): the calls waiting for the owner, their verdicts, and expiry.

A call decided `Ask` is held here (`hold`), in its call machine's `pending` phase, and told to
the owner's side with every canonical argument; a verdict or the expiry is fed to that machine
(`core.call`), which records it before anything follows from it and, for an approval, runs
exactly that call, re-decided (`Judge.redecide`) at verdict time. The owner hears of a verdict
once it is durable; the approved call runs on after that. The desk is rebuilt from the ledger
at start, so pending approvals survive a restart; a rebuilt `write_file` approval gets its
preview again, read as the file is then (§12.2).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import anyio
import anyio.abc

from bxcore.clock import now_ms, parse_rfc3339
from bxcore.labels import DataClass, Label
from bxcore.tools import ToolName
from bxcore.wire.messages import (
    ApprovalRequested,
    ApprovalSettled,
    ApprovalState,
    AskWhy,
    AwaitApproval,
    Error,
    ErrorCode,
    Outcome,
    Pending,
    Scope,
    Settled,
    TargetInfo,
    ToolResponse,
    VerdictRequest,
    short,
)
from services.brokerd.calls import CallBook, Key
from services.brokerd.core import policy
from services.brokerd.core.approvals import (
    ALPHABET,
    ID_LENGTH,
    Approval,
    Approvals,
    UnknownApproval,
)
from services.brokerd.core.args import ArgsError, parse
from services.brokerd.core.call import Call, Phase, pending_again, step
from services.brokerd.core.call_events import Ask, Effect, Expired, Refuse, Settle, Verdict
from services.brokerd.core.grants import takes_write
from services.brokerd.core.records import CallRecords
from services.brokerd.core.replay import replay
from services.brokerd.core.targets import Target, seen_in, shown, value_at
from services.brokerd.driver import Driver
from services.brokerd.judge import Judge
from services.brokerd.preview_file import preview
from services.brokerd.state import StateError

log = logging.getLogger(__name__)


def random_id() -> str:
    return "".join(secrets.choice(ALPHABET) for _ in range(ID_LENGTH))


class Desk:
    def __init__(
        self,
        *,
        book: CallBook,
        driver: Driver,
        judge: Judge,
        publish: Callable[[Any], None],
        ttl_s: float,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.book = book
        self.driver = driver
        self.judge = judge
        self.approvals = Approvals(random_id)
        self._publish = publish
        self._ttl_ms = int(ttl_s * 1000)
        self._clock = clock
        self._calls: dict[str, Call] = {}  # approval id -> its call, while not answered
        self._settled: dict[str, anyio.Event] = {}
        self._changed = anyio.Event()
        self._tasks: anyio.abc.TaskGroup | None = None

    def __repr__(self) -> str:
        return f"Desk({self.approvals!r}, ttl {self._ttl_ms // 1000} s)"

    # --- asking ------------------------------------------------------------------------------

    def approval_for(self, session: str, ask: policy.Ask) -> tuple[str, bool]:
        """The approval id a call decided `ask` is recorded under, and whether a session-wide
        approval covers it already (then it is that approval's id)."""
        winner = ask.winner
        covering = self.approvals.covering(session, winner.id, winner.sha256, ask.why)
        if covering is not None:
            return covering, True
        return self.approvals.fresh_id(self._ever_used), False

    def hold(self, call: Call, ask: Ask, preview: str | None = None) -> None:
        """A call recorded pending: wait for the owner, and tell the owner's side (with what a
        `write_file` would change, `preview`)."""
        now = self._clock()
        winner = ask.ask.winner
        approval = Approval(
            ask.approval,
            call.session,
            call.call,
            call.tool,
            call.arguments,
            winner.id,
            winner.sha256,
            ask.label,
            ask.ask.why,
            now,
            now + self._ttl_ms,
            preview=preview,
            write=winner.write if takes_write(call.tool) else None,
            job=self._job_of(call.session),
            targets=target_infos(ask.ask.targets) if ask.ask.why is AskWhy.UNTRUSTED else None,
        )
        self._add(approval, call)
        self._publish(ApprovalRequested(approval.info()))
        log.info("asked the owner: %r (%s)", approval, ask.ask.why.value)

    def _add(self, approval: Approval, call: Call) -> None:
        self.approvals.add(approval)
        self._calls[approval.id] = call
        self._settled[approval.id] = anyio.Event()
        self._changed.set()

    def _ever_used(self, approval_id: str) -> bool:
        return self.book.ledger.approval(approval_id) is not None

    async def await_approval(self, message: AwaitApproval) -> ToolResponse | Error:
        """Wait up to `wait_ms` for the approval to settle and its call to be answered."""
        try:
            approval = self.approvals.get(message.approval)
        except UnknownApproval:
            approval = None
        if approval is None:  # settled long ago: its call's answer is in the ledger
            found = self.book.ledger.approval(message.approval)
            if found is not None and found[0] == message.session:
                recorded = self.book.lookup(found)
                if recorded is not None and recorded.verdict is not None:
                    return ToolResponse(message.id, self._answer_of(found, recorded))
        if approval is None or approval.session != message.session:
            text = f"no approval {message.approval} for session {message.session}"
            return Error(message.id, ErrorCode.UNKNOWN_APPROVAL, text)
        key = (approval.session, approval.call)
        settled = self._settled[approval.id]
        if settled.is_set() and self.book.making(key) is None:
            # Answered at once, with no checkpoint: `wait_ms = 0` must not hide an answer.
            return ToolResponse(message.id, self._answer(approval, key))
        with anyio.move_on_after(message.wait_ms / 1000):
            await settled.wait()
            making = self.book.making(key)
            if making is not None:
                return ToolResponse(message.id, await making.wait())
            return ToolResponse(message.id, self._answer(approval, key))
        return ToolResponse(message.id, Pending(approval.id))

    def _answer(self, approval: Approval, key: Key) -> Outcome:
        """The answer of a settled approval's call, kept or rebuilt from the ledger."""
        outcome = self.book.kept(key)
        if outcome is None:
            recorded = self.book.lookup(key)
            if recorded is None:
                return Pending(approval.id)
            outcome = replay(recorded, self.judge.mcp())
        return outcome

    def _answer_of(self, key: Key, recorded: CallRecords) -> Outcome:
        return self.book.kept(key) or replay(recorded, self.judge.mcp())

    # --- verdicts and expiry -------------------------------------------------------------------

    def pending(self) -> list[Approval]:
        return sorted(self.approvals.pending(), key=lambda a: a.requested_ms)

    async def verdict(self, message: VerdictRequest) -> Settled | Error:
        """The owner's answer, recorded before anything follows from it; the reply comes
        once it is durable, and an approved call runs on after it."""
        try:
            approval = self.approvals.get(message.approval)
        except UnknownApproval:
            if self._ever_used(message.approval):  # settled long ago (kept in the ledger)
                text = f"approval {message.approval} is already settled"
                return Error(message.id, ErrorCode.ALREADY_SETTLED, text)
            return Error(message.id, ErrorCode.UNKNOWN_APPROVAL, f"no approval {message.approval}")
        call = self._calls.get(approval.id)
        if approval.state is not ApprovalState.PENDING or call is None:
            text = f"approval {approval.id} is already {approval.state}"
            return Error(message.id, ErrorCode.ALREADY_SETTLED, text)
        decision: policy.Decision | None = None
        if message.approve and call.phase is Phase.PENDING:
            try:
                decision = self.judge.redecide(call.session, call.tool, call.arguments)
            except StateError as error:  # the call cannot be judged, so it is not run
                return Error(message.id, ErrorCode.UNAVAILABLE, str(error))
        said: list[Settle | Refuse] = []
        heard = anyio.Event()

        def tell(call: Call, effect: Effect) -> None:
            self._told(call, effect)
            if isinstance(effect, Settle | Refuse) and not said:
                said.append(effect)
                heard.set()

        # The first step is taken now, before anything awaits: a second verdict finds the
        # call being settled. The rest runs on its own, past the reply.
        seen = self._seer(approval.id)
        call, effects = step(call, Verdict(message.approve, message.by, message.scope, decision))
        seen(call)
        assert self._tasks is not None
        self._tasks.start_soon(self.driver.carry_out, call, effects, tell, seen)
        await heard.wait()
        answer = said[0]
        if isinstance(answer, Refuse):
            code = ErrorCode.UNAVAILABLE if answer.unavailable else ErrorCode.ALREADY_SETTLED
            return Error(message.id, code, answer.why)
        return Settled(message.id, approval.id, answer.state, answer.reason)

    def _seer(self, approval: str) -> Callable[[Call], None]:
        """Keeps the desk's copy of the call as it moves; forgets it once answered."""

        def seen(now: Call) -> None:
            if now.phase is Phase.ANSWERED:
                self._calls.pop(approval, None)
            else:
                self._calls[approval] = now

        return seen

    def _told(self, call: Call, effect: Effect) -> None:
        """What a verdict or the expiry settled: the owner's side hears of it; an approval for
        the whole session is remembered; an approved call is in flight before anyone asks."""
        if not isinstance(effect, Settle):
            return
        moved = self.approvals.move(effect.approval, effect.move)
        if effect.reason is None:  # approved, and it runs: a repeat waits for its answer
            self.book.begin(call.key)
            if effect.scope is Scope.SESSION:
                self.approvals.remember_scope(moved)
        self._settled[moved.id].set()
        self._publish(ApprovalSettled(moved.id, moved.session, moved.state, effect.reason))
        for forgotten in self.approvals.forget_settled():
            self._settled.pop(forgotten, None)

    async def run(self) -> None:
        """Expire approvals nobody answered in time (§9.3), until cancelled."""
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            tasks.start_soon(self.preview_rebuilt)
            while True:
                await self.expire_due()
                self._changed = anyio.Event()
                due = self.approvals.next_expiry()
                wait = 3600.0 if due is None else max(0.0, (due - self._clock()) / 1000)
                with anyio.move_on_after(min(wait, 3600.0)):
                    await self._changed.wait()

    async def expire_due(self) -> None:
        """Expire every approval whose time is over by the desk's clock."""
        for approval in self.approvals.due(self._clock()):
            call = self._calls.get(approval.id)
            if call is not None:
                await self.driver.drive(call, Expired(), self._told, self._seer(approval.id))

    # --- after a restart ---------------------------------------------------------------------

    async def preview_rebuilt(self) -> None:
        """Give each pending `write_file` approval rebuilt from the ledger its preview, read
        now (the ledger keeps the arguments, not the preview); said to the owner's side."""
        for approval in self.pending():
            if approval.tool != ToolName.WRITE_FILE or approval.preview is not None:
                continue
            try:
                args = parse(approval.tool, approval.arguments)
            except ArgsError:
                continue
            shown = await preview(args)
            current = self.approvals.get(approval.id)
            if shown is not None and current.state is ApprovalState.PENDING:
                self.approvals.add(replace(current, preview=shown))
                self._publish(ApprovalRequested(self.approvals.get(approval.id).info()))

    def rebuild(self, unsettled: list[CallRecords], scoped: list[CallRecords]) -> None:
        """The pending approvals and the session scopes, from the ledger's records (§9.4);
        settled approvals stay in the ledger, read when asked for."""
        for held in unsettled:
            if held.decision["outcome"] == "pending" and held.verdict is None:
                approval = self._rebuilt(held)
                if approval is not None:
                    again = pending_again(
                        approval.id, approval.session, approval.call, approval.tool,
                        approval.arguments,
                    )  # fmt: skip
                    self._add(approval, again)
        for held in scoped:
            verdict = held.verdict
            if verdict is not None and verdict["approve"] and verdict["scope"] == "session":
                approval = self._rebuilt(held)
                if approval is not None:
                    self.approvals.remember_scope(replace(approval, state=ApprovalState.APPROVED))

    def _rebuilt(self, held: CallRecords) -> Approval | None:
        """The approval a decision asked for; None (and said in the log) when the record does
        not hold one: brokerd never wrote it so, and it must not stop brokerd's start."""
        try:
            approval = _approval_of(held.decision, self._ttl_ms, self.book.tool_of)
        except (KeyError, TypeError, ValueError, AssertionError) as error:
            log.error(
                "the ledger's decision for call %r holds no approval brokerd can rebuild (%s: "
                "%s); run `bxctl audit verify`",
                held.decision.get("call"),
                type(error).__name__,
                error,
            )
            return None
        return replace(approval, write=self._write_of(approval), job=self._job_of(approval.session))

    def _job_of(self, session: str) -> str | None:
        """For a job's run, the card's line saying whose run it is and what it sees (§19)."""
        scope = self.judge.scope(session)
        return None if scope is None else scope.describe()

    def _write_of(self, approval: Approval) -> bool | None:
        """A shell approval's binding, as its grant says when that is still the version the
        ledger names (the record does not hold it); None when unknown."""
        if not takes_write(approval.tool):
            return None
        for grant in self.judge.grants.current().valid:
            if grant.id == approval.grant and grant.sha256 == approval.grant_sha256:
                return grant.write
        return None


def _approval_of(
    decision: dict[str, object], ttl_ms: int, tool_of: Callable[[Key], str | None]
) -> Approval:
    label = decision["label"]
    assert isinstance(label, dict)
    requested = parse_rfc3339(str(decision["at"]))
    return Approval(
        str(decision["approval"]),
        str(decision["session"]),
        str(decision["call"]),
        str(decision["tool"]),
        str(decision["arguments"]),
        str(decision["grant"]),
        str(decision["grant_sha256"]),
        Label(DataClass(label["class"]), bool(label["untrusted"])),
        AskWhy(str(decision.get("why") or AskWhy.GRANT_ASKS.value)),
        requested,
        requested + ttl_ms,
        targets=_recorded_targets(decision, tool_of),
    )


def target_infos(targets: tuple[Target, ...]) -> tuple[TargetInfo, ...]:
    return tuple(TargetInfo(t.at, short(t.shown()), short(t.origin), t.tool) for t in targets)


def _recorded_targets(
    decision: dict[str, object], tool_of: Callable[[Key], str | None]
) -> tuple[TargetInfo, ...] | None:
    """A pending decision's targets as the ledger recorded them, their values read back from
    its arguments, and the tool of the call an untrusted one first appeared in."""
    recorded = decision.get("targets")
    if not isinstance(recorded, list) or decision.get("why") != AskWhy.UNTRUSTED.value:
        return None
    arguments, session = str(decision["arguments"]), str(decision["session"])
    found = []
    for entry in recorded:
        seen = seen_in(entry["origin"], session)
        tool = None if seen is None else tool_of((seen.session, seen.call))
        value = short(shown(value_at(arguments, entry["at"])))
        found.append(TargetInfo(entry["at"], value, short(entry["origin"]), tool))
    return tuple(found)
