"""The broker socket (SPEC §3.3): loopd's tool calls, its waits on approvals, and the labels
it asks for and absorbs.

A `tool_request` is one call machine (`core.call`) driven to rest (`driver`): answered from
the call book when it was decided before (I8), else judged on the session's label, recorded,
run and recorded again before it is answered (I1, I3). A call the owner must approve is held
by the desk, which this socket shares with the admin socket; a `write_file` is held with its
preview, the file read in a worker thread before the pending decision is recorded (§12.2).
A `tools_query` is answered with the MCP tools the judge decides now (pinned and unchanged,
§18.4): what loopd offers the model. `job_started` and `job_ended` record a job's run (§19),
each once per run, answered once durable; `owner_words` is the words book's (`words`, §20).
"""

from __future__ import annotations

import functools
import logging

import anyio

from bxcore import mcp_tools
from bxcore.ids import job_run_session
from bxcore.routes import Refusal, Route, Routes
from bxcore.tools import ToolName
from bxcore.wire import codec as wire
from bxcore.wire.messages import (
    Absorb,
    AuditAccept,
    AuditTail,
    AuditVerify,
    AwaitApproval,
    Error,
    ErrorCode,
    Explain,
    Failed,
    GrantAdd,
    GrantRemove,
    GrantsReload,
    JobEnded,
    JobHistoryQuery,
    JobRecorded,
    JobStarted,
    NotesQuery,
    OfferedTool,
    Outcome,
    OwnerWords,
    PendingQuery,
    State,
    StateQuery,
    ToolRequest,
    ToolResponse,
    Tools,
    ToolsQuery,
    VerdictRequest,
)
from bxcore.wire.sockets import BrokerAnswer, BrokerRequest
from services.brokerd.calls import CallBook
from services.brokerd.core import policy, records
from services.brokerd.core.args import ToolArgs
from services.brokerd.core.call import AUDIT_UNAVAILABLE, Call, Phase
from services.brokerd.core.call_events import Ask, Decided, Effect, Found, Unlabelled
from services.brokerd.desk import Desk
from services.brokerd.driver import Driver
from services.brokerd.judge import Judge
from services.brokerd.ledger.commit import Committer
from services.brokerd.ledger.file import LedgerUnavailable
from services.brokerd.preview_file import preview
from services.brokerd.state import StateError, StateStore, answer_state
from services.brokerd.words import WordsBook

log = logging.getLogger(__name__)

NOT_FOUND = Found(None)  # what most calls find: no record of them
ON_ADMIN = "this belongs on the admin socket"
REFUSAL = Refusal(
    "brokerd does not take {type}",
    elsewhere=dict.fromkeys(
        (
            VerdictRequest,
            PendingQuery,
            GrantsReload,
            AuditTail,
            AuditVerify,
            AuditAccept,
            Explain,
            GrantAdd,
            GrantRemove,
            NotesQuery,
            JobHistoryQuery,
        ),
        ON_ADMIN,
    ),
)


class Broker:
    def __init__(
        self,
        *,
        book: CallBook,
        committer: Committer,
        driver: Driver,
        judge: Judge,
        labels: StateStore,
        desk: Desk,
        words: WordsBook,
    ) -> None:
        self.book = book
        self.committer = committer
        self.driver = driver
        self.judge = judge
        self.labels = labels
        self.desk = desk
        self.routes: Routes[BrokerAnswer] = Routes(
            BrokerRequest,
            REFUSAL,
            Route(ToolRequest, self.tool_response),
            Route(AwaitApproval, desk.await_approval),
            Route(Absorb, self.absorb),
            Route(StateQuery, self.state),
            Route(ToolsQuery, self.tools),
            Route(JobStarted, self.job_started),
            Route(JobEnded, self.job_ended),
            Route(OwnerWords, words.give),
        )
        self._jobs_lock = anyio.Lock()  # a run's record is looked for and written as one

    def __repr__(self) -> str:
        return f"Broker({self.book!r}, {self.committer!r})"

    async def tool_response(self, message: ToolRequest) -> ToolResponse:
        return ToolResponse(message.id, await self.tool_request(message))

    async def state(self, message: StateQuery) -> State | Error:
        return answer_state(self.labels, message)

    async def tools(self, message: ToolsQuery) -> Tools:
        """The MCP tools to offer (§18.4), in name order; as many as one message holds (the
        rest are left out with a log line: a catalog that large is the owner's to trim)."""
        return offered(message.id, self.judge.mcp())

    async def absorb(self, message: Absorb) -> State | Error:
        """The parent takes on the child's label (§6.4), recorded."""
        try:
            child = self.labels.read(message.child)
            before = self.labels.read(message.session)
            after = self.labels.raise_(message.session, before, child)
        except StateError as error:
            return Error(message.id, ErrorCode.UNAVAILABLE, str(error))
        try:
            await self.committer.append(
                [records.absorbed(parent=message.session, child=message.child, to=after)]
            )
        except LedgerUnavailable as error:
            return Error(message.id, ErrorCode.UNAVAILABLE, f"audit unavailable: {error}")
        return State(message.id, message.session, after)

    async def job_started(self, message: JobStarted) -> JobRecorded | Error:
        """`job_started` for the run, once: asked again, the first record answers (§19)."""
        entry = records.job_started(
            job=message.job, run=message.run, session=job_run_session(message.job, message.run),
            why=message.why.value, job_sha256=message.job_sha256, slot=message.slot,
            missed=message.missed,
        )  # fmt: skip
        return await self._record_job(message.id, message.job, message.run, entry)

    async def job_ended(self, message: JobEnded) -> JobRecorded | Error:
        """`job_ended` for a run recorded started, once (§19)."""
        entry = records.job_ended(
            job=message.job, run=message.run, session=job_run_session(message.job, message.run),
            how=message.how.value, steps=message.steps, runtime_ms=message.runtime_ms,
            tokens=message.tokens, detail=message.detail,
        )  # fmt: skip
        return await self._record_job(message.id, message.job, message.run, entry)

    async def _record_job(
        self, request_id: str, job: str, run: int, entry: records.Entry
    ) -> JobRecorded | Error:
        kind = entry[0]
        async with self._jobs_lock:
            try:
                found = {r["kind"]: r for r in self.committer.ledger.job_records(job, 0, run)}
                if kind in found:
                    return JobRecorded(request_id, job, run, int(str(found[kind]["seq"])), False)
                if kind == "job_ended" and "job_started" not in found:
                    why = f"job {job}'s run {run} was never recorded started"
                    return Error(request_id, ErrorCode.INVALID, why)
                (head,) = await self.committer.append([entry])
            except LedgerUnavailable as error:
                return Error(request_id, ErrorCode.UNAVAILABLE, f"audit unavailable: {error}")
        return JobRecorded(request_id, job, run, head.seq, True)

    # --- tool calls ------------------------------------------------------------------------

    async def tool_request(self, request: ToolRequest) -> Outcome:
        key = (request.session, request.call)
        making = self.book.making(key)
        if making is not None:
            return await making.wait()
        kept = self.book.kept(key)
        if kept is not None:
            return kept
        call = Call(request.session, request.call, request.tool, request.arguments)
        try:
            recorded = self.book.lookup(key)
        except LedgerUnavailable:  # the ledger cannot say whether it was decided: refuse
            return AUDIT_UNAVAILABLE
        # The MCP tools are looked at only to replay a recorded call (an invalid one's detail).
        found = NOT_FOUND if recorded is None else Found(recorded, self.judge.mcp())
        if found.records is None and not self.committer.available:
            return AUDIT_UNAVAILABLE
        answer = self.book.begin(key)
        try:
            call = await self.driver.drive(call, found)
            if call.phase is Phase.JUDGING:
                judged = self._judged(call)
                preview = await _preview_of(judged) if _asks(judged) else None
                call = await self.driver.drive(call, judged, functools.partial(self._tell, preview))
        finally:
            if self.book.making(key) is answer:  # not answered: say so to who waits
                self.book.finish(key, Failed("brokerd stopped before this call was answered"))
        return await answer.wait()  # given by now: no wait

    def _judged(self, call: Call) -> Decided | Unlabelled:
        try:
            label, decision = self.judge.decide(call.session, call.tool, call.arguments)
        except StateError as error:
            log.error("%s", error)
            return Unlabelled(str(error))
        if not isinstance(decision, policy.Ask):
            return Decided(label, decision)
        approval, covered = self.desk.approval_for(call.session, decision)
        allowed = self.judge.approved(decision) if covered else None
        return Decided(label, decision, approval, allowed)

    def _tell(self, preview: str | None, call: Call, effect: Effect) -> None:
        assert isinstance(effect, Ask), effect  # a tool call's only word to the owner's side
        self.desk.hold(call, effect, preview)


def offered(request_id: str, catalog: mcp_tools.Catalog) -> Tools:
    """`tools` for `catalog`: each tool's pinned description and inputSchema, cut to what one
    message can carry."""
    tools: list[OfferedTool] = []
    room = wire.MAX_MESSAGE - len(wire.encode(Tools(request_id, ()))) - 1024
    for name, tool in sorted(catalog.tools.items()):
        offer = OfferedTool(name, tool.description, mcp_tools.canonical(tool.input_schema))
        size = len(wire.encode(Tools(request_id, (offer,))))
        if size > room:
            log.warning("MCP tool %s is not offered: the tool list would not fit a message", name)
            continue
        room -= size
        tools.append(offer)
    return Tools(request_id, tuple(tools))


def _asks(judged: Decided | Unlabelled) -> bool:
    """Whether the owner is about to be asked about the call."""
    return (
        isinstance(judged, Decided)
        and judged.covered is None
        and isinstance(judged.decision, policy.Ask)
    )


async def _preview_of(judged: Decided | Unlabelled) -> str | None:
    """What a `write_file` the owner is about to be asked about (`_asks`) would change
    (§12.2)."""
    assert isinstance(judged, Decided)
    decision = judged.decision
    if not isinstance(decision, policy.Ask) or decision.args.tool != ToolName.WRITE_FILE:
        return None
    assert isinstance(decision.args, ToolArgs)  # write_file is a built-in tool
    return await preview(decision.args)
