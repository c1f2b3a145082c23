"""The approval desk (SPEC §9): asks the owner, takes verdicts, expires the unanswered.

A call decided `Ask` is recorded pending with a new approval id and published with every
canonical argument; what runs after an approval is exactly that, re-decided (`redecide`) at
verdict time. A verdict is recorded before anything follows from it. The desk is rebuilt
from the ledger at start, so pending approvals survive a restart.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import anyio

from bxcore.clock import now_ms, parse_rfc3339
from bxcore.deny import DenyReason
from bxcore.labels import DataClass, Label
from bxcore.messages import (
    ApprovalRequested,
    ApprovalSettled,
    ApprovalState,
    AskWhy,
    AwaitApproval,
    Denied,
    Error,
    ErrorCode,
    Outcome,
    Pending,
    Scope,
    Settled,
    ToolRequest,
    ToolResponse,
    VerdictRequest,
)
from services.brokerd.broker import AUDIT_UNAVAILABLE, Broker, decision_entry
from services.brokerd.calls import replay
from services.brokerd.core import policy, records
from services.brokerd.core.approvals import (
    AlreadySettled,
    Approval,
    Approvals,
    Move,
    UnknownApproval,
)
from services.brokerd.index import CallRecords
from services.brokerd.ledger import LedgerUnavailable

log = logging.getLogger(__name__)

EXPIRED_BY = "brokerd (no answer in time)"


class Desk:
    def __init__(
        self,
        broker: Broker,
        publish: Callable[[Any], None],
        ttl_s: float,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.broker = broker
        self.approvals = Approvals()
        self._publish = publish
        self._ttl_ms = int(ttl_s * 1000)
        self._clock = clock
        self._settled: dict[str, anyio.Event] = {}
        self._settling: set[str] = set()
        self._changed = anyio.Event()
        self._tasks: anyio.abc.TaskGroup | None = None
        broker.desk = self

    def __repr__(self) -> str:
        return f"Desk({self.approvals!r}, ttl {self._ttl_ms // 1000} s)"

    # --- asking ------------------------------------------------------------------------------

    async def ask(
        self, request: ToolRequest, label: Label, ask: policy.Ask, arguments: str
    ) -> Outcome:
        """A call the owner must approve: recorded pending and published; or, when a
        session-scoped approval covers it, recorded allowed and run."""
        winner = ask.winner
        covering = self.approvals.covering(request.session, winner.id, winner.sha256, ask.why)
        outcome: records.DecisionOutcome = "allowed" if covering is not None else "pending"
        approval_id = covering or self.approvals.fresh_id(self._ever_used)
        why = None if covering else ask.why.value
        entry = decision_entry(request, arguments, label, outcome, winner,
                               approval=approval_id, why=why)  # fmt: skip
        if not await self.broker.durable(entry):
            return AUDIT_UNAVAILABLE
        if covering is not None:  # a session-scoped approval covers it (§9.2)
            allowed = policy.approved(ask, self.broker.grants.current().valid, self.broker.own)
            return await self.broker.run((request.session, request.call), allowed)
        now = self._clock()
        approval = Approval(
            approval_id,
            request.session,
            request.call,
            request.tool,
            arguments,
            winner.id,
            winner.sha256,
            label,
            ask.why,
            now,
            now + self._ttl_ms,
        )
        self._add(approval)
        self._publish(ApprovalRequested(approval.info()))
        log.info("asked the owner: %r (%s)", approval, ask.why.value)
        return Pending(approval_id)

    def _add(self, approval: Approval) -> None:
        self.approvals.add(approval)
        self._settled[approval.id] = anyio.Event()
        self._changed.set()

    def _ever_used(self, approval_id: str) -> bool:
        return self.broker.ledger.approval(approval_id) is not None

    async def await_approval(self, message: AwaitApproval) -> Any:
        """Wait up to `wait_ms` for the approval to settle and its call to be answered."""
        try:
            approval = self.approvals.get(message.approval)
        except UnknownApproval:
            approval = None
        if approval is None:  # settled long ago: its call's answer is in the ledger
            found = self.broker.ledger.approval(message.approval)
            if found is not None and found[0] == message.session:
                recorded = self.broker.ledger.lookup(*found)
                if recorded is not None and recorded.verdict is not None:
                    return ToolResponse(message.id, self._answer_of(found, recorded))
        if approval is None or approval.session != message.session:
            text = f"no approval {message.approval} for session {message.session}"
            return Error(message.id, ErrorCode.UNKNOWN_APPROVAL, text)
        key = (approval.session, approval.call)
        settled = self._settled[approval.id]
        if settled.is_set() and self.broker.calls.making(key) is None:
            # Answered at once, with no checkpoint: `wait_ms = 0` must not hide an answer.
            return ToolResponse(message.id, self._answer(approval, key))
        with anyio.move_on_after(message.wait_ms / 1000):
            await settled.wait()
            making = self.broker.calls.making(key)
            if making is not None:
                return ToolResponse(message.id, await making.wait())
            return ToolResponse(message.id, self._answer(approval, key))
        return ToolResponse(message.id, Pending(approval.id))

    def _answer(self, approval: Approval, key: tuple[str, str]) -> Outcome:
        """The answer of a settled approval's call, kept or rebuilt from the ledger."""
        outcome = self.broker.calls.kept(key)
        if outcome is None:
            recorded = self.broker.ledger.lookup(*key)
            outcome = replay(recorded) if recorded is not None else Pending(approval.id)
        return outcome

    def _answer_of(self, key: tuple[str, str], recorded: CallRecords) -> Outcome:
        return self.broker.calls.kept(key) or replay(recorded)

    # --- verdicts --------------------------------------------------------------------------

    def pending(self) -> list[Approval]:
        return sorted(self.approvals.pending(), key=lambda a: a.requested_ms)

    async def verdict(self, message: VerdictRequest) -> Any:
        """The owner's answer, recorded before anything follows from it."""
        try:
            approval = self.approvals.get(message.approval)
        except UnknownApproval:
            if self._ever_used(message.approval):  # settled long ago (kept in the ledger)
                text = f"approval {message.approval} is already settled"
                return Error(message.id, ErrorCode.ALREADY_SETTLED, text)
            return Error(message.id, ErrorCode.UNKNOWN_APPROVAL, f"no approval {message.approval}")
        if approval.state is not ApprovalState.PENDING or approval.id in self._settling:
            state = approval.state if approval.id not in self._settling else "being settled"
            text = f"approval {approval.id} is already {state}"
            return Error(message.id, ErrorCode.ALREADY_SETTLED, text)
        self._settling.add(approval.id)
        try:
            return await self._settle(message, approval)
        finally:
            self._settling.discard(approval.id)

    async def _settle(self, message: VerdictRequest, approval: Approval) -> Any:
        if not message.approve:
            outcome = await self._end(
                approval, Move.REFUSE, message.by, message.scope, DenyReason.OWNER_DENIED
            )
            if outcome is None:
                return Error(message.id, ErrorCode.UNAVAILABLE, "audit unavailable")
            return Settled(message.id, approval.id, ApprovalState.REFUSED, DenyReason.OWNER_DENIED)
        broker = self.broker
        try:
            label = broker.state.read(approval.session)
        except Exception as error:  # StateError: the call cannot be judged, so it is not run
            return Error(message.id, ErrorCode.UNAVAILABLE, str(error))
        decision = policy.redecide(
            label, approval.tool, approval.arguments, broker.grants.current().valid, broker.own
        )
        if isinstance(decision, policy.Denied):
            outcome = await self._end(
                approval, Move.APPROVE, message.by, message.scope, decision.reason
            )
            if outcome is None:
                return Error(message.id, ErrorCode.UNAVAILABLE, "audit unavailable")
            return Settled(message.id, approval.id, ApprovalState.APPROVED, decision.reason)
        entry = records.verdict(
            approval=approval.id,
            approve=True,
            by=message.by,
            scope=message.scope.value,
            outcome="allowed",
            grant=decision.winner.id,
            grant_sha256=decision.winner.sha256,
        )
        try:
            await broker.committer.append([entry])
        except LedgerUnavailable:
            return Error(message.id, ErrorCode.UNAVAILABLE, "audit unavailable")
        moved = self.approvals.move(approval.id, Move.APPROVE)
        if message.scope is Scope.SESSION:
            self.approvals.remember_scope(moved)
        key = (approval.session, approval.call)
        broker.calls.start(key)
        assert self._tasks is not None
        self._tasks.start_soon(self._run_approved, key, decision)
        self._announce(moved, None)
        return Settled(message.id, approval.id, ApprovalState.APPROVED)

    async def _run_approved(self, key: tuple[str, str], allowed: policy.Allowed) -> None:
        outcome: Outcome = Denied(DenyReason.AUDIT_UNAVAILABLE)
        try:
            outcome = await self.broker.run(key, allowed)
        finally:
            self.broker.calls.finish(key, outcome)

    async def _end(
        self, approval: Approval, move: Move, by: str, scope: Scope, reason: DenyReason
    ) -> Outcome | None:
        """Settle with a denial: record it, answer the call, tell the owner's side."""
        entry = records.verdict(
            approval=approval.id,
            approve=move is Move.APPROVE,
            by=by,
            scope=scope.value,
            outcome="denied",
            reason=reason.value,
        )
        try:
            await self.broker.committer.append([entry])
        except LedgerUnavailable:
            return None
        try:
            moved = self.approvals.move(approval.id, move)
        except AlreadySettled:
            return None
        outcome = Denied(reason)
        self.broker.calls.finish((approval.session, approval.call), outcome)
        self._announce(moved, reason)
        return outcome

    def _announce(self, approval: Approval, reason: DenyReason | None) -> None:
        self._settled[approval.id].set()
        self._publish(ApprovalSettled(approval.id, approval.session, approval.state, reason))
        for forgotten in self.approvals.forget_settled():
            self._settled.pop(forgotten, None)

    # --- expiry and restart ------------------------------------------------------------------

    async def run(self) -> None:
        """Expire approvals nobody answered in time (§9.3), until cancelled."""
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            while True:
                for approval in self.approvals.due(self._clock()):
                    if approval.id not in self._settling:
                        await self._end(
                            approval,
                            Move.EXPIRE,
                            EXPIRED_BY,
                            Scope.ONCE,
                            DenyReason.APPROVAL_EXPIRED,
                        )
                self._changed = anyio.Event()
                due = self.approvals.next_expiry()
                wait = 3600.0 if due is None else max(0.0, (due - self._clock()) / 1000)
                with anyio.move_on_after(min(wait, 3600.0)):
                    await self._changed.wait()

    def rebuild(self, unsettled: list[CallRecords], scoped: list[CallRecords]) -> None:
        """The pending approvals and the session scopes, from the ledger's records (§9.4);
        settled approvals stay in the ledger, read when asked for."""
        for held in unsettled:
            if held.decision["outcome"] == "pending" and held.verdict is None:
                approval = self._rebuilt(held)
                if approval is not None:
                    self._add(approval)
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
            return _approval_of(held.decision, self._ttl_ms)
        except (KeyError, TypeError, ValueError, AssertionError) as error:
            log.error(
                "the ledger's decision for call %r holds no approval brokerd can rebuild (%s: "
                "%s); run `bxctl audit verify`",
                held.decision.get("call"),
                type(error).__name__,
                error,
            )
            return None


def _approval_of(decision: dict[str, object], ttl_ms: int) -> Approval:
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
    )
