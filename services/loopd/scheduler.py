"""loopd's job scheduler (SPEC §19): reads `{home}/jobs/` each tick, starts the runs that fall
due (`job_plan.step`) or that the owner asks for, and carries each run to its recorded end.

A run is, in this order: the scheduler's state written durably with the run open (its number
taken); `job_started` recorded by brokerd; the job's prompt written as the owner message of
the fresh session `job-<id>-<n>`; its turn run like any other (its approvals wait for the
owner), within `max_steps` and `max_runtime_s`, ended `denied` when the owner refuses one of
its calls or lets it expire; `job_ended` recorded; the state written with the run closed.
Killed anywhere in between, the next start finds the run open and carries the same run on:
`job_started` again is answered from the ledger, the history says whether the prompt was
written and the turn ended. So a run is neither lost nor doubled. A state that cannot be written
(a full disk, issue 28) starts no run, is said once in the log, and is written again each tick
until it can be. Time is read through `now` and waited through `sleep`, both given.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime, tzinfo
from pathlib import Path

import anyio
from anyio.abc import TaskGroup

from bxcore.client import AskFailed, Client
from bxcore.errors import SetupError, one_line
from bxcore.home import disk
from bxcore.home.atomic import write_atomically
from bxcore.home.layout import Home
from bxcore.ids import job_run_of, job_run_session
from bxcore.jobs.files import read_jobs
from bxcore.jobs.job import BUDGETS, InvalidJob, Job
from bxcore.wire.messages import (
    EndReason,
    Error,
    JobEnd,
    JobEnded,
    JobStarted,
    OwnerSaid,
    ToolDenied,
    TurnEvent,
    short,
)
from services.loopd import job_plan
from services.loopd.history import SessionLog
from services.loopd.job_plan import Busy, JobState, Open
from services.loopd.sessions import Sessions
from services.loopd.turn import Turns

log = logging.getLogger("loopd")

TICK_S = 1.0  # how often the jobs folder is looked at (an `every = "2s"` job runs on time)
SAVE_EVERY_MS = 30_000  # `since` alone is written at most this far behind (see `_stale`)
RECORD_RETRY_S = 2.0  # brokerd did not answer a job record: asked again after this
REFUSALS = {"owner_denied": "the owner refused", "approval_expired": "the owner did not answer"}
ENDS = {
    EndReason.DONE: JobEnd.DONE,
    EndReason.MAX_STEPS: JobEnd.BUDGET,
    EndReason.BUDGET: JobEnd.BUDGET,
    EndReason.ERROR: JobEnd.ERROR,
    EndReason.CANCELLED: JobEnd.CANCELLED,
}


class NotStarted(Exception):
    """`run_now` could not start a run; `str()` says why in one line."""


class Scheduler:
    def __init__(
        self,
        home: Home,
        sessions: Sessions,
        turns: Turns,
        broker: Callable[[], Client],
        zone: tzinfo,
        now: Callable[[], datetime],
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        self._home = home
        self._sessions = sessions
        self._turns = turns
        self._broker = broker
        self._zone = zone
        self._now = now
        self._sleep = sleep
        self._states = _read_states(home.job_runs)
        self._saved = dict(self._states)  # what the file holds
        self._unsaved: str | None = None  # why the last write of the states failed
        self._tasks: TaskGroup | None = None

    def __repr__(self) -> str:
        running = [f"{job}-{s.open.run}" for job, s in self._states.items() if s.open]
        return f"Scheduler({len(self._states)} jobs, running: {', '.join(running) or 'none'})"

    async def serve(self, tasks: TaskGroup) -> None:
        """Carry on the runs a stop left open, then start runs as they fall due, for ever."""
        self._tasks = tasks
        for job_id, state in sorted(self._states.items()):
            if state.open is not None:
                log.info("carrying on job %s's run %d", job_id, state.open.run)
                tasks.start_soon(self._carry, job_id, state.open)
        while True:
            self.tick()
            await self._sleep(TICK_S)

    def tick(self) -> None:
        """Look at every job once and start what falls due."""
        now = self._now()
        before = dict(self._states)
        jobs = read_jobs(self._home.jobs, _grant_ids(self._home.grants)).valid
        seen = {job.id: job for job in jobs}
        for job_id in set(self._states) - set(seen):  # gone or invalid: nothing is missed
            passed = job_plan.passed(self._states[job_id], now)
            assert passed is not None
            self._states[job_id] = passed
        started: list[tuple[str, Open]] = []
        for job in jobs:
            state, opened = job_plan.step(
                job, self._states.get(job.id), self._zone, now, self._taken(job.id)
            )
            self._states[job.id] = state
            if opened is not None:
                started.append((job.id, opened))
        if (started or self._stale()) and not self._save() and started:
            for job_id, _ in started:  # its number is not taken for good: no run starts
                self._restore(job_id, before.get(job_id))
            return
        for job_id, opened in started:
            log.info("job %s: run %d (%s)", job_id, opened.run, opened.why)
            self._start(job_id, opened)

    def run_now(self, job_id: str) -> str:
        """Start a run of `job_id` now (`bxctl job run`); its session. NotStarted says why not."""
        found = read_jobs(self._home.jobs, _grant_ids(self._home.grants))
        job = next((j for j in found.everything() if j.id == job_id), None)
        if job is None:
            raise NotStarted(f"no job {job_id!r} in {self._home.jobs}")
        if isinstance(job, InvalidJob):
            raise NotStarted(f"job {job_id} is invalid: {job.problem}")
        try:
            state, opened = job_plan.by_owner(
                job, self._states.get(job_id), self._now(), self._taken(job_id)
            )
        except Busy as busy:
            raise NotStarted(str(busy)) from None
        was = self._states.get(job_id)
        self._states[job_id] = state
        if not self._save():
            self._restore(job_id, was)
            raise NotStarted(f"the run could not be started: {self._unsaved}")
        self._start(job_id, opened)
        return job_run_session(job_id, opened.run)

    def saw(self, event: TurnEvent) -> None:
        """A turn event of any session: a job's run (or its sub-agent's) whose call the owner
        refused, or let expire, ends `denied` (§19)."""
        run = job_run_of(event.session)
        if run is None or not isinstance(event.event, ToolDenied):
            return
        said = REFUSALS.get(event.event.reason.value)
        state = self._states.get(run[0])
        if said is None or state is None or state.open is None or state.open.run != run[1]:
            return
        self._stop(run[0], JobEnd.DENIED, f"{said} a {event.event.tool} call")

    # --- one run ------------------------------------------------------------------------------

    def _start(self, job_id: str, opened: Open) -> None:
        assert self._tasks is not None, "the scheduler is not serving"
        self._tasks.start_soon(self._carry, job_id, opened)

    async def _carry(self, job_id: str, opened: Open) -> None:
        """The run from its `job_started` to its `job_ended` (either may be recorded already)."""
        session_id = job_run_session(job_id, opened.run)
        started = JobStarted(
            _rid(), job_id, opened.run, opened.why, opened.job_sha256, opened.slot, opened.missed
        )
        if not await self._record(started):
            self._close(job_id)
            return
        try:
            steps, tokens, (how, detail) = await self._turn(job_id, opened, session_id)
        except Exception as error:  # a bug must not take the scheduler down with it
            log.exception("job %s's run %d failed", job_id, opened.run)
            steps, tokens = 0, None
            how, detail = JobEnd.ERROR, short(f"loopd failed during the run: {error}")
        ran_ms = max(0, job_plan.ms(self._now()) - opened.started_ms)
        ended = JobEnded(_rid(), job_id, opened.run, how, steps, ran_ms, tokens, detail)
        await self._record(ended)
        self._close(job_id)
        log.info("job %s's run %d ended %s after %d steps", job_id, opened.run, how, steps)

    async def _turn(
        self, job_id: str, opened: Open, session_id: str
    ) -> tuple[int, int | None, tuple[JobEnd, str | None]]:
        """The run's turn: its prompt written if it was not, run (or resumed) to its end within
        the job's budgets; the steps it took, the tokens it spent (None: the server gave no
        figures), and how it ended."""
        job = self._job(job_id)
        with self._sessions.held(session_id) as session:
            if session.turns == 0:
                if job is None:
                    self._decide(job_id, JobEnd.ERROR, "the job's file is gone or invalid")
                else:
                    self._turns.emit(session, 1, OwnerSaid(job.prompt))
            if not session.ended(1) and session.turns:
                limit = job.max_steps if job is not None else BUDGETS["max_steps"][0]
                tokens = job.max_tokens if job is not None else BUDGETS["max_tokens"][0]
                runtime = job.max_runtime_s if job is not None else BUDGETS["max_runtime_s"][0]
                async with anyio.create_task_group() as watch:
                    watch.start_soon(self._watch, job_id, opened, runtime)
                    await self._turns.run(session, 1, max_steps=limit, max_tokens=tokens)
                    watch.cancel_scope.cancel()
            counted = session.turn_tokens(1) is not None  # the server said what answers cost
            spent = self._turns.sub_agents.spent(session, 1) if counted else None
            return session.steps(1), spent, self._how(job_id, session)

    async def _watch(self, job_id: str, opened: Open, limit_s: int) -> None:
        """Stop the run at its `max_runtime_s`, or at once when a stop before a restart had
        decided its end already."""
        current = self._states[job_id].open
        if current is not None and current.ending is None:
            left_ms = opened.started_ms + limit_s * 1000 - job_plan.ms(self._now())
            await self._sleep(max(0.0, left_ms / 1000))
            self._decide(job_id, JobEnd.RUNTIME, f"max_runtime_s {limit_s} passed")
        await self._turns.cancel(job_run_session(job_id, opened.run))

    def _stop(self, job_id: str, how: JobEnd, detail: str) -> None:
        """End the open run `how`, and stop its turn."""
        opened = self._states[job_id].open
        if opened is not None and opened.ending is None:
            self._decide(job_id, how, detail)
            assert self._tasks is not None
            self._tasks.start_soon(self._turns.cancel, job_run_session(job_id, opened.run))

    def _decide(self, job_id: str, how: JobEnd, detail: str) -> None:
        """How the open run ends, kept across a restart (the first reason found stands)."""
        self._states[job_id] = job_plan.ending(self._states[job_id], how, detail)
        self._save()

    def _how(self, job_id: str, session: SessionLog) -> tuple[JobEnd, str | None]:
        opened = self._states[job_id].open
        if opened is not None and opened.ending is not None:
            return opened.ending, opened.detail
        reason = session.end_reason(1)
        if reason is EndReason.MAX_STEPS:
            return JobEnd.BUDGET, f"max_steps {session.steps(1)} reached"
        if reason is EndReason.BUDGET:
            spent = self._turns.sub_agents.spent(session, 1)
            return JobEnd.BUDGET, f"{spent} tokens: max_tokens or [loop] max_tokens_per_day reached"
        if reason is EndReason.ERROR:
            return JobEnd.ERROR, short(session.failure(1) or "the turn failed")
        return ENDS.get(reason, JobEnd.ERROR) if reason else JobEnd.ERROR, None

    def _close(self, job_id: str) -> None:
        self._states[job_id] = job_plan.closed(self._states[job_id])
        self._save()

    async def _record(self, message: JobStarted | JobEnded) -> bool:
        """Ask brokerd to record it, again until it answers; False when it refuses."""
        while True:
            client = self._broker()
            try:
                answer = await client.ask(message)
            except AskFailed as error:
                log.warning("brokerd did not record %s: %s; asking again", message.TYPE, error)
                await self._sleep(RECORD_RETRY_S)
                continue
            finally:
                client.close()
            if isinstance(answer, Error):
                log.error(
                    "brokerd did not record job %s's %s: %s",
                    message.job,
                    message.TYPE,
                    answer.message,
                )
                return False
            return True

    def _job(self, job_id: str) -> Job | None:
        found = read_jobs(self._home.jobs, _grant_ids(self._home.grants))
        return next((job for job in found.valid if job.id == job_id), None)

    def _taken(self, job_id: str) -> Callable[[int], bool]:
        return lambda run: self._sessions.exists(job_run_session(job_id, run))

    def _stale(self) -> bool:
        """Whether the file lags behind in more than a recent `since` (a new job, or slots
        handled longer ago than `SAVE_EVERY_MS`): ticks that only move `since` are written
        now and then, not each second (each write is two fsyncs). A restart that reads an
        older `since` finds no slot in between that started a run (a run is written before
        it starts); only slots a disabled job passed in that short time could count again."""
        for job_id, state in self._states.items():
            saved = self._saved.get(job_id)
            if saved is None or replace(saved, since_ms=state.since_ms) != state:
                return True
            if state.since_ms - saved.since_ms >= SAVE_EVERY_MS:
                return True
        return False

    def _restore(self, job_id: str, state: JobState | None) -> None:
        if state is None:
            self._states.pop(job_id, None)
        else:
            self._states[job_id] = state

    def _save(self) -> bool:
        """Write the states durably; False when they cannot be (said in the log once until
        they are): the states differ from the file's, so the next tick writes them again."""
        path = self._home.job_runs
        try:
            path.parent.mkdir(mode=0o700, exist_ok=True)
            write_atomically(path, job_plan.dump(self._states))
        except OSError as error:
            why = disk.unwritable(path.parent, error)
            if self._unsaved is None:
                log.error("cannot write the jobs' states %s: %s; trying again", path, why)
            self._unsaved = why
            return False
        if self._unsaved is not None:
            log.warning("the jobs' states are written again")
        self._saved, self._unsaved = dict(self._states), None
        return True


def _read_states(path: Path) -> dict[str, JobState]:
    """The states a stop left; none at the first start. A damaged file stops loopd until the
    owner looks (`SetupError`): guessing could start a run twice or lose one."""
    try:
        return job_plan.load(path.read_bytes())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        raise SetupError(
            f"{path}: {one_line(error)}; move it away to start every job from its next slot"
        ) from None


def _grant_ids(folder: Path) -> set[str] | None:
    """The grants a job may name, as loopd can see them (the files' ids), or None when it may
    not look (deploy/: `grants/` is brokerd's group's alone): brokerd, which parses them, gives
    a job naming a missing or invalid one no grant at all anyway."""
    try:
        return {n[: -len(".toml")] for n in os.listdir(folder) if n.endswith(".toml")}
    except FileNotFoundError:
        return set()
    except OSError:
        return None


def _rid() -> str:
    return f"j-{os.urandom(8).hex()}"
