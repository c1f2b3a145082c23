"""loopd's shell (SPEC §10): the `loop` socket, the `loop-events` stream, and a worker per
busy session, so each session runs one turn at a time and sessions run side by side.

An owner message is written to the session's history before it is accepted, as the turn after
every turn the history holds; one for a session id of the sub-agents' form (`sub-…`) or of a
job's run (`job-…`) is refused, writing nothing, and so is one that cannot be written, or that
comes while the sessions' disk is full (issue 28): its answer says so, and the next message
is taken as soon as there is room again.
Job runs are the scheduler's (`scheduler.py`, §19): it starts them, and carries on those a stop
cut off; `job_run` starts one now. At start, loopd reads every
history once, keeping a summary of each, and resumes the turns a crash cut off (§10.6); a
history stays loaded only while used or recently used (`sessions.py`). A `cancel` stops the
session's running turn (`turn.py`) and is answered once that turn has written its end.
`tokens_query` gives the day's tokens (`usage.py`, counted from the histories). It never
writes `{home}/state/`; it cannot approve, and its only peer with power is brokerd's broker
socket.
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime

import anyio
from anyio.abc import TaskGroup

from bxcore.bounded import Bounded
from bxcore.client import Client
from bxcore.clock import local_zone
from bxcore.daemon import Context
from bxcore.events import Publisher
from bxcore.ids import JOB_RUN_PREFIX, SUB_AGENT_PREFIX, job_run_of, kept_for_sub_agents
from bxcore.once import Once
from bxcore.router import Router
from bxcore.routes import Refusal, Route, Routes
from bxcore.wire.codec import MAX_MESSAGE
from bxcore.wire.messages import (
    Accepted,
    Cancel,
    Cancelled,
    Error,
    ErrorCode,
    History,
    HistoryQuery,
    JobRun,
    JobRunStarted,
    OwnerMessage,
    OwnerSaid,
    SessionInfo,
    SessionList,
    SessionsQuery,
    Tokens,
    TokensQuery,
    TurnEvent,
    short,
)
from bxcore.wire.sockets import LoopAnswer, LoopRequest
from services.loopd import room
from services.loopd.history import SessionLog
from services.loopd.history_write import HistoryUnwritable
from services.loopd.model import Model
from services.loopd.providers import make_model
from services.loopd.scheduler import NotStarted, Scheduler
from services.loopd.sessions import Sessions
from services.loopd.turn import Turns
from services.loopd.usage import Meter, Tally

log = logging.getLogger("loopd")

REMEMBERED = 1024  # owner messages whose answer a retry gets again
SUB_SESSION_REFUSED = (
    f"session ids starting with {SUB_AGENT_PREFIX} are kept for sub-agents; "
    "choose another session name"
)
JOB_SESSION_REFUSED = (
    f"session ids starting with {JOB_RUN_PREFIX} are kept for jobs' runs; "
    "choose another session name"
)
HISTORY_BUDGET = MAX_MESSAGE // 2  # events are escaped once more inside a history message
REFUSAL = Refusal("loopd does not take {type}")


class Loop:
    def __init__(self, ctx: Context, model: Model, publisher: Publisher, tasks: TaskGroup) -> None:
        self._ctx = ctx
        self._publisher = publisher
        self._tasks = tasks
        tally = Tally(local_zone(os.environ))  # the machine's day, as the owner lives it
        self.sessions = Sessions(ctx.home, tally=tally, context=ctx.config.loop.context_chars)
        self.meter = Meter(tally, ctx.config.loop.max_tokens_per_day)
        self._busy: set[str] = set()
        # (request id, session) -> its answer: a retried owner message never runs a second turn;
        # one that was not taken is tried afresh
        self._accepted: Once[tuple[str, str], Accepted | Error] = Once(
            Bounded(REMEMBERED), keep=lambda answer: isinstance(answer, Accepted)
        )
        self._cancelled: Once[tuple[str, str], Cancelled] = Once(Bounded(REMEMBERED))
        self._job_runs: Once[str, JobRunStarted | Error] = Once(Bounded(REMEMBERED))
        self.routes: Routes[LoopAnswer] = Routes(
            LoopRequest,
            REFUSAL,
            Route(OwnerMessage, self.owner_message),
            Route(SessionsQuery, self.sessions_query),
            Route(HistoryQuery, self.history_query),
            Route(Cancel, self.cancel),
            Route(TokensQuery, self.tokens_query),
            Route(JobRun, self.job_run),
        )
        broker = ctx.endpoint("broker")
        self.turns = Turns(
            ctx.config,
            model,
            lambda: Client(ctx.zmq, broker, socket="broker"),
            self.sessions.held,
            self._publish,
            self.sessions.exists,
            meter=self.meter,
        )
        self.scheduler = Scheduler(
            ctx.home,
            self.sessions,
            self.turns,
            lambda: Client(ctx.zmq, broker, socket="broker"),
            local_zone(os.environ),
            lambda: datetime.now(UTC),
        )

    def __repr__(self) -> str:
        return f"Loop({self.sessions!r}, {len(self._busy)} busy, {self.scheduler!r})"

    def _publish(self, event: TurnEvent) -> None:
        self._publisher.publish(event)
        self.scheduler.saw(event)

    def resume(self) -> None:
        """Read every history and resume cut-off turns (a sub-agent's by its parent's, a job's
        run by the scheduler)."""
        for name, turn in self.sessions.scan():
            if job_run_of(name) is None:
                log.info("resuming %s turn %s", name, turn)
                self._work(name)

    async def owner_message(self, message: OwnerMessage) -> Accepted | Error:
        """Written to the session's history, then a turn for it; a retry gets the first answer."""
        if kept_for_sub_agents(message.session):  # a spawn must never find it taken
            return Error(message.id, ErrorCode.BAD_MESSAGE, SUB_SESSION_REFUSED)
        if message.session.startswith(JOB_RUN_PREFIX):  # nor a job's run
            return Error(message.id, ErrorCode.BAD_MESSAGE, JOB_SESSION_REFUSED)
        return await self._accepted.answer(
            (message.id, message.session), lambda: self._accept(message)
        )

    async def _accept(self, message: OwnerMessage) -> Accepted | Error:
        refused = room.refusal(self._ctx.home.sessions)
        if refused is not None:
            return Error(message.id, ErrorCode.UNAVAILABLE, short(refused))
        session = self.sessions.get(message.session)
        turn = session.next_turn
        try:
            said = session.event(turn, OwnerSaid(message.text))
        except HistoryUnwritable as error:
            why = room.not_taken(error.why, room=error.room)
            return Error(message.id, ErrorCode.UNAVAILABLE, short(why))
        self._publisher.publish(said)
        self._work(message.session)
        return Accepted(message.id, message.session, turn, said.seq)

    async def cancel(self, message: Cancel) -> Cancelled:
        """Stop the session's running turn and its sub-agents' (§12.2); answered once it has
        ended `cancelled`, with its number (none when nothing ran). A retry gets the first
        answer."""
        return await self._cancelled.answer(
            (message.id, message.session), lambda: self._cancel(message)
        )

    async def _cancel(self, message: Cancel) -> Cancelled:
        waiting = None
        if message.session in self._busy:  # its worker may not have begun the turn yet
            unfinished = self.sessions.get(message.session).unfinished()
            waiting = unfinished[0] if unfinished else None
        turn = await self.turns.cancel(message.session, waiting)
        return Cancelled(message.id, message.session, turn)

    async def job_run(self, message: JobRun) -> JobRunStarted | Error:
        """Start a run of the job now (§19); a retry gets the first answer."""
        return await self._job_runs.answer(message.id, lambda: self._job_run(message))

    async def _job_run(self, message: JobRun) -> JobRunStarted | Error:
        try:
            session = self.scheduler.run_now(message.job)
        except NotStarted as error:
            return Error(message.id, ErrorCode.INVALID, str(error))
        return JobRunStarted(message.id, message.job, session)

    async def sessions_query(self, message: SessionsQuery) -> SessionList:
        return SessionList(message.id, tuple(self._info(s) for s in self.sessions.names()))

    def _info(self, name: str) -> SessionInfo:
        summary = self.sessions.summary(name)
        busy = name in self._busy or self.turns.running(name)  # a job's run is busy too
        return SessionInfo(name, summary.turns, busy, summary.updated, summary.tokens)

    async def tokens_query(self, message: TokensQuery) -> Tokens:
        day, spent = self.meter.today()
        return Tokens(message.id, day, spent, self.meter.cap)

    async def history_query(self, message: HistoryQuery) -> History:
        """A page read from the file (asking creates no session)."""
        events, more = self.sessions.page(message.session, message.after or 0, HISTORY_BUDGET)
        return History(message.id, message.session, tuple(events), more)

    def _work(self, name: str) -> None:
        """Run the session's waiting turns, one at a time, unless a worker already does. The
        worker holds the session's history loaded from now until it is done."""
        if name in self._busy:
            return
        self._busy.add(name)
        self._tasks.start_soon(self._worker, self.sessions.hold(name))

    async def _worker(self, session: SessionLog) -> None:
        try:
            while session.unfinished():
                turn = session.unfinished()[0]
                try:
                    await self.turns.run(session, turn)
                except Exception as error:  # a bug: the turn ends saying so, the next may run
                    log.exception("%s turn %d failed", session.session, turn)
                    self.turns.broke(session, turn, error)
        except Exception:
            log.exception(
                "the worker of %s failed; its turn resumes at the next start", session.session
            )
        finally:
            self._busy.discard(session.session)
            self.sessions.release(session.session)


async def serve(ctx: Context) -> None:
    publisher = Publisher(ctx.zmq, ctx.endpoint("loop-events"), service="loopd")
    model = make_model(ctx.config.model, os.environ)
    try:
        async with anyio.create_task_group() as tasks:
            loop = Loop(ctx, model, publisher, tasks)
            router = Router(ctx.zmq, ctx.endpoint("loop"), loop.routes, service="loopd")
            loop.resume()
            log.info("serving: %r, %r", router, loop)
            tasks.start_soon(router.serve)
            tasks.start_soon(loop.scheduler.serve, tasks)
    finally:
        with anyio.CancelScope(shield=True):
            await model.aclose()
        publisher.close()
