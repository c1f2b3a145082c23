"""What loopd's scheduler does for one job (SPEC §19), as data: each job's state (every slot
up to `since_ms` handled, the last run number given, the run begun and not yet recorded
ended), the step from one state to the next at `now`, and the state file's shape.

Pure: no clock (`now` is an argument), no files. When a run falls due is `bxcore.jobs.schedule`'s
`due`; this module adds what it leaves to its caller: the run's number, never given twice;
no run while the previous one is open; a new job starting from its next slot; a job that is
gone or invalid missing nothing (enabling or fixing it never catches up).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, tzinfo
from typing import Any

from bxcore.clock import rfc3339
from bxcore.jobs.job import Job
from bxcore.jobs.schedule import due
from bxcore.wire.messages import JobEnd, JobWhy

VERSION = 1


@dataclass(frozen=True, slots=True)
class Open:
    """A run begun and not yet recorded ended: what its `job_started` says, and, once the
    scheduler has decided to stop it, how it ends (kept so that a restart says the same)."""

    run: int
    why: JobWhy
    started_ms: int
    job_sha256: str
    slot: str | None = None
    missed: int = 0
    ending: JobEnd | None = None
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class JobState:
    since_ms: int
    runs: int = 0
    open: Open | None = None


class Busy(Exception):
    """The job's previous run is still going; `str()` says which."""


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _at(milliseconds: int) -> datetime:
    return datetime.fromtimestamp(milliseconds / 1000, UTC)


def _next_run(state: JobState, taken: Callable[[int], bool]) -> int:
    """The next run number: after the last one given, and after any whose session exists
    (a state file lost or restored from a backup must not put a run into an old session)."""
    run = state.runs + 1
    while taken(run):
        run += 1
    return run


def step(
    job: Job,
    state: JobState | None,
    zone: tzinfo,
    now: datetime,
    taken: Callable[[int], bool] = lambda run: False,
) -> tuple[JobState, Open | None]:
    """The job's state after looking at `now`, and the run to start now, if any. A job seen
    for the first time starts from its next slot, never with the past."""
    if state is None:
        return JobState(ms(now)), None
    if ms(now) <= state.since_ms:
        return state, None
    found = due(job, zone, _at(state.since_ms), now, running=state.open is not None)
    if not found.run:
        return replace(state, since_ms=ms(now)), None
    why = JobWhy.CATCH_UP if found.catch_up else JobWhy.SCHEDULE
    slot = None if found.slot is None else rfc3339(ms(found.slot))
    opened = Open(_next_run(state, taken), why, ms(now), job.sha256, slot, found.missed)
    return JobState(ms(now), opened.run, opened), opened


def passed(state: JobState | None, now: datetime) -> JobState | None:
    """The state of a job that is gone, invalid or disabled: its slots up to `now` are handled
    with no run (they are not missed); its run numbers are kept."""
    if state is None:
        return None
    return replace(state, since_ms=max(state.since_ms, ms(now)))


def by_owner(
    job: Job,
    state: JobState | None,
    now: datetime,
    taken: Callable[[int], bool] = lambda run: False,
) -> tuple[JobState, Open]:
    """A run the owner asked for (`bxctl job run`); Busy while the previous one is open. The
    schedule is untouched: its slots still fall when they fall."""
    state = state if state is not None else JobState(ms(now))
    if state.open is not None:
        raise Busy(f"job {job.id}'s run {state.open.run} is still going")
    opened = Open(_next_run(state, taken), JobWhy.OWNER, ms(now), job.sha256)
    return replace(state, runs=opened.run, open=opened), opened


def ending(state: JobState, how: JobEnd, detail: str) -> JobState:
    """The open run is to end `how` (the first reason found stands)."""
    if state.open is None or state.open.ending is not None:
        return state
    return replace(state, open=replace(state.open, ending=how, detail=detail))


def closed(state: JobState) -> JobState:
    return replace(state, open=None)


# --- the state file --------------------------------------------------------------------------


def dump(states: Mapping[str, JobState]) -> bytes:
    jobs = {job_id: asdict(state) for job_id, state in sorted(states.items())}
    return json.dumps({"version": VERSION, "jobs": jobs}, indent=1).encode() + b"\n"


def load(data: bytes) -> dict[str, JobState]:
    """The states a file holds; ValueError (one line) when it is not one loopd wrote."""
    try:
        whole = json.loads(data)
        if whole.get("version") != VERSION:
            raise ValueError(f"version {whole.get('version')!r}, not {VERSION}")
        return {str(job_id): _state(value) for job_id, value in whole["jobs"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"not a job state file: {error}") from None


def _state(value: Any) -> JobState:
    opened = value["open"]
    if opened is not None:
        opened = Open(**{**opened, "why": JobWhy(opened["why"])})
        if opened.ending is not None:
            opened = replace(opened, ending=JobEnd(opened.ending))
    state = JobState(int(value["since_ms"]), int(value["runs"]), opened)
    if not isinstance(state.since_ms, int) or state.runs < 0:
        raise ValueError("a job's state is out of range")
    return state
