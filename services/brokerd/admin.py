"""The admin socket (SPEC §3.6, §9, §13): the owner's questions and verdicts, behind CURVE.

Only the owner's key and gatewayd's may connect (the ZAP allow-list), so nothing on the model's
side can approve a call, reload grants or read the ledger (I6). Tool calls are refused here,
as admin messages are refused on the broker socket.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

import anyio

from bxcore.client import AskFailed, Client
from bxcore.home import disk
from bxcore.routes import Refusal, Route, Routes
from bxcore.wire.codec import MAX_MESSAGE, encode
from bxcore.wire.messages import (
    Absorb,
    ApprovalInfo,
    ApprovalRequested,
    AuditAccept,
    AuditRecords,
    AuditReport,
    AuditTail,
    AuditVerify,
    AwaitApproval,
    Error,
    ErrorCode,
    Explain,
    Explanation,
    GrantAdd,
    GrantInfo,
    GrantList,
    GrantRemove,
    GrantsReload,
    JobHistoryQuery,
    LedgerHealth,
    LedgerQuery,
    LedgerStatus,
    Notes,
    NotesQuery,
    PendingList,
    PendingQuery,
    State,
    StateQuery,
    ToolRequest,
    ToolsQuery,
    Verdict,
    VerdictRequest,
    short,
)
from bxcore.wire.sockets import AdminAnswer, AdminRequest
from services.brokerd.core import policy
from services.brokerd.core.grant_check import denies_said
from services.brokerd.core.grants import Grant, InvalidGrant, takes_write
from services.brokerd.desk import Desk
from services.brokerd.grant_files import (
    GrantFields,
    GrantRefused,
    add_grant,
    match_items,
    parse_match,
    remove_grant,
)
from services.brokerd.judge import Judge
from services.brokerd.ledger.file import Ledger, LedgerState, LedgerUnavailable
from services.brokerd.ledger.verify import LedgerUnreadable, verify_file
from services.brokerd.state import StateError, answer_state

REFUSAL = Refusal(
    "the admin socket does not take {type}",
    elsewhere=dict.fromkeys(
        (ToolRequest, AwaitApproval, Absorb, ToolsQuery), "this belongs on the broker socket"
    ),
)
MAX_RECORDS_BYTES = MAX_MESSAGE - 64 * 1024


def grant_info(grant: Grant | InvalidGrant) -> GrantInfo:
    if isinstance(grant, InvalidGrant):  # an invalid deny says what it denies meanwhile
        problem = "; ".join(part for part in (grant.problem, denies_said(grant)) if part)
        return GrantInfo(short(grant.id), grant.sha256, False, short(problem))
    return GrantInfo(
        grant.id,
        grant.sha256,
        True,
        None,
        grant.tool,
        grant.mode.value,
        grant.path,
        grant.host,
        grant.class_.value,
        grant.untrusted,
        short(grant.note) or None,
        grant.write if takes_write(grant.tool) else None,
        grant.kind.value if grant.kind is not None else None,
        tuple(short(item) for item in match_items(grant)) if grant.mcp else None,
    )


class Admin:
    def __init__(
        self, *, desk: Desk, judge: Judge, ledger: Ledger, memory: Callable[[], Client]
    ) -> None:
        self.desk = desk
        self.judge = judge
        self.ledger = ledger
        self._memory = memory
        self.routes: Routes[AdminAnswer] = Routes(
            AdminRequest,
            REFUSAL,
            Route(VerdictRequest, desk.verdict),
            Route(PendingQuery, self.pending_list),
            Route(GrantsReload, self.grants_reload),
            Route(AuditTail, self.audit_tail),
            Route(AuditVerify, self.audit_verify),
            Route(AuditAccept, self.audit_accept),
            Route(StateQuery, self.state),
            Route(Explain, self.explain),
            Route(GrantAdd, self.grant_add),
            Route(GrantRemove, self.grant_remove),
            Route(NotesQuery, self.notes),
            Route(JobHistoryQuery, self.job_history),
            Route(LedgerQuery, self.ledger_status),
        )

    def __repr__(self) -> str:
        return f"Admin({self.desk!r})"

    async def grants_reload(self, message: GrantsReload) -> GrantList:
        """Every grant as brokerd decides by it now: checked against the pins too."""
        grants = self.judge.checked(self.judge.mcp())
        every: list[Grant | InvalidGrant] = [*grants.valid, *grants.invalid]
        every.sort(key=lambda g: g.id)
        return GrantList(message.id, tuple(grant_info(g) for g in every))

    async def grant_add(self, message: GrantAdd) -> GrantList | Error:
        """The console's **Add grant**: the same check and write as `bxctl grant add`."""
        folder = self.judge.grants.folder
        try:
            fields = GrantFields(
                message.tool,
                message.mode,
                message.path,
                message.host,
                message.class_,
                message.untrusted,
                message.note or "",
                message.kind,
                parse_match(list(message.match or ())),
                message.write,
            )
            pins = self.judge.mcp().pins
            await anyio.to_thread.run_sync(
                add_grant, folder, message.grant, fields, "the owner's console", pins
            )
        except GrantRefused as error:
            return Error(message.id, ErrorCode.INVALID, short(str(error)))
        return await self.grants_reload(GrantsReload(message.id))

    async def grant_remove(self, message: GrantRemove) -> GrantList | Error:
        folder = self.judge.grants.folder
        try:
            await anyio.to_thread.run_sync(remove_grant, folder, message.grant)
        except GrantRefused as error:
            return Error(message.id, ErrorCode.INVALID, short(str(error)))
        return await self.grants_reload(GrantsReload(message.id))

    async def notes(self, message: NotesQuery) -> Notes | Error:
        """The owner's look at memory, asked of memoryd (which only brokerd reaches)."""
        client = self._memory()
        upstream = NotesQuery(f"n-{secrets.token_hex(8)}", message.query)
        try:
            async with client:
                answer = await client.ask(upstream)
        except AskFailed as error:
            return Error(message.id, ErrorCode.UNAVAILABLE, short(f"memoryd: {error}"))
        return replace(answer, id=message.id)

    async def state(self, message: StateQuery) -> State | Error:
        return answer_state(self.judge.labels, message, peek=True)

    async def pending_list(self, message: PendingQuery) -> PendingList:
        """The pending approvals, oldest first, each with every argument, as many as fit in
        one message: a flood of large approvals must not leave the owner with no answer."""
        infos: list[ApprovalInfo] = []
        size = 0
        for approval in self.desk.pending():
            info = approval.info()
            grown = size + len(encode(ApprovalRequested(info)))
            if grown > MAX_RECORDS_BYTES:
                continue  # listed once older ones are settled; never shown cut
            infos.append(info)
            size = grown
        return PendingList(message.id, tuple(infos))

    async def audit_tail(self, message: AuditTail) -> AuditRecords | Error:
        """The newest records that fit in one message, oldest first."""
        try:
            found = self.ledger.tail(message.n, message.session)
        except LedgerUnavailable as error:
            return Error(message.id, ErrorCode.UNAVAILABLE, str(error))
        return AuditRecords(message.id, _newest_that_fit(found))

    async def job_history(self, message: JobHistoryQuery) -> AuditRecords | Error:
        """A job's last runs as the ledger has them: `job_started`, `job_ended` (§19)."""
        try:
            found = self.ledger.job_records(message.job, message.n)
        except LedgerUnavailable as error:
            return Error(message.id, ErrorCode.UNAVAILABLE, str(error))
        return AuditRecords(message.id, _newest_that_fit(found))

    async def audit_verify(self, message: AuditVerify) -> AuditReport | Error:
        """The chain checked (fast, `verify.verify_file`); a chain that is whole but ends
        before a head brokerd confirmed or the owner saw is not ok either: the ledger's own
        problem says which."""
        ledger = self.ledger
        try:
            verified = await anyio.to_thread.run_sync(verify_file, ledger.path)
        except LedgerUnreadable as error:
            return Error(message.id, ErrorCode.UNAVAILABLE, str(error))
        report = verified.report
        ok, why = report.ok, report.why
        if ok and ledger.state is LedgerState.BROKEN:
            ok, why = False, ledger.problem
        return AuditReport(
            message.id,
            ok,
            report.records,
            report.head.seq,
            report.head.hash,
            None if why is None else short(why),
        )

    async def ledger_status(self, message: LedgerQuery) -> LedgerStatus:
        """The ledger's state now, as every call meets it (issue 28): `bxctl status` and
        `bxctl up` ask, so that no copy of it can go stale unnoticed; answered also while the
        ledger loads. `free`: the room on its disk, which a full one is told by."""
        ledger = self.ledger
        problem = ledger.problem
        return LedgerStatus(
            message.id,
            LedgerHealth(ledger.state.value),
            ledger.head.seq,
            None if problem is None else short(problem),
            disk.free_bytes(ledger.path.parent),
        )

    async def audit_accept(self, message: AuditAccept) -> AuditReport | Error:
        """The owner takes a cut or rolled-back ledger as it is (issue 10): brokerd reads it
        again whole and writes again; a `recovered` record says what was lost."""
        ledger = self.ledger
        try:
            said = await anyio.to_thread.run_sync(ledger.accept)
        except ValueError as error:
            return Error(message.id, ErrorCode.BAD_MESSAGE, short(str(error)))
        self.desk.rebuild(ledger.unsettled(), ledger.scoped())
        head = ledger.head
        return AuditReport(message.id, True, head.seq, head.seq, head.hash, short(said))

    async def explain(self, message: Explain) -> Explanation | Error:
        """What brokerd would decide for this call now, step by step; nothing is recorded."""
        try:
            label = self.judge.labels.peek(message.session)
        except StateError as error:
            return Error(message.id, ErrorCode.UNAVAILABLE, str(error))
        trace: list[str] = [
            f"session {message.session}: {label.class_}, "
            f"{'untrusted' if label.untrusted else 'trusted'}"
        ]
        decision = self.judge.explain(
            message.session, label, message.tool, message.arguments, trace
        )
        steps = tuple(short(step) for step in trace)
        if isinstance(decision, policy.Denied):
            winner = decision.grant.id if decision.grant else None
            return Explanation(message.id, Verdict.DENIED, label, steps, decision.reason, winner)
        verdict = Verdict.ASK if isinstance(decision, policy.Ask) else Verdict.ALLOWED
        return Explanation(message.id, verdict, label, steps, None, decision.winner.id)


def _newest_that_fit(records: Sequence[Mapping[str, object]]) -> tuple[str, ...]:
    """The newest of `records` (oldest first) whose lines fit in one message, oldest first:
    the oldest are left out."""
    lines: list[str] = []
    size = 0
    for record in reversed(records):
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
        size += len(line.encode("utf-8")) * 2 + 8  # room for escaping inside the message
        if size > MAX_RECORDS_BYTES:
            break
        lines.append(line)
    lines.reverse()
    return tuple(lines)
