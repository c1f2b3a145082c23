"""loopd's scheduler decisions for one job (§19), with the clock an argument: run numbers
never reused, no run while one is open, a new job never starting with the past, a gone job
missing nothing, catch-up once or skipped, and the state file read back as written."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bxcore.jobs.job import Job, parse_job
from bxcore.wire.messages import JobEnd, JobWhy
from services.loopd import job_plan
from services.loopd.job_plan import Busy, JobState, Open, by_owner, ms, step

T0 = datetime(2026, 5, 4, 7, 0, 0, tzinfo=UTC)


def job(extra: str = "", every: str = "1m") -> Job:
    parsed = parse_job("j", f'every = "{every}"\nprompt = "p"\n{extra}'.encode())
    assert isinstance(parsed, Job), parsed
    return parsed


def test_a_job_seen_first_starts_from_its_next_slot_never_the_past() -> None:
    state, opened = step(job(), None, UTC, T0 + timedelta(seconds=1))
    assert opened is None and state == JobState(ms(T0) + 1000)
    state, opened = step(job(), state, UTC, T0 + timedelta(seconds=59))
    assert opened is None
    state, opened = step(job(), state, UTC, T0 + timedelta(seconds=60, milliseconds=300))
    assert opened == Open(1, JobWhy.SCHEDULE, ms(T0) + 60_300, job().sha256,
                          "2026-05-04T07:01:00.000Z", 0)  # fmt: skip
    assert state.runs == 1 and state.open == opened


def test_no_run_while_the_previous_one_is_open_and_the_slots_meanwhile_are_not_queued() -> None:
    state = JobState(ms(T0), 1, Open(1, JobWhy.SCHEDULE, ms(T0), "x"))
    state, opened = step(job(), state, UTC, T0 + timedelta(minutes=5))
    assert opened is None and state.since_ms == ms(T0 + timedelta(minutes=5))
    state = job_plan.closed(state)
    state, opened = step(job(), state, UTC, T0 + timedelta(minutes=5, seconds=30))
    assert opened is None  # the slots that passed while it ran are gone, not queued
    _, opened = step(job(), state, UTC, T0 + timedelta(minutes=6))
    assert opened is not None and opened.run == 2


@pytest.mark.parametrize(("catch_up", "runs"), [("once", 1), ("skip", 0)])
def test_after_a_downtime_catch_up_once_runs_once_and_skip_not_at_all(
    catch_up: str, runs: int
) -> None:
    state = JobState(ms(T0), 3)
    hourly = job(f'catch_up = "{catch_up}"', every="1h")
    later = T0 + timedelta(hours=3, minutes=30)  # 3 slots passed, the last 30 minutes ago
    state, opened = step(hourly, state, UTC, later)
    assert (opened is not None) == bool(runs)
    if opened is not None:
        assert (opened.run, opened.why, opened.slot, opened.missed) == (4, JobWhy.CATCH_UP, None, 3)
    _, again = step(hourly, state, UTC, later + timedelta(seconds=1))
    assert again is None


def test_a_run_number_whose_session_exists_is_never_given_again() -> None:
    taken = {1, 2}.__contains__
    _, opened = by_owner(job(), JobState(ms(T0)), T0, taken)
    assert opened.run == 3 and opened.why is JobWhy.OWNER


def test_the_owner_cannot_start_a_run_while_one_is_open() -> None:
    state, _ = by_owner(job(), None, T0)
    with pytest.raises(Busy, match="job j's run 1 is still going"):
        by_owner(job(), state, T0)


def test_a_gone_or_disabled_job_misses_nothing() -> None:
    state = job_plan.passed(JobState(ms(T0), 2), T0 + timedelta(days=3))
    assert state == JobState(ms(T0 + timedelta(days=3)), 2)
    state, opened = step(job("enabled = false"), state, UTC, T0 + timedelta(days=4))
    assert opened is None
    _, opened = step(job(), state, UTC, T0 + timedelta(days=4, seconds=1))
    assert opened is None  # enabled again: no catch-up for the time it was off


def test_the_first_reason_to_end_a_run_stands() -> None:
    state, _ = by_owner(job(), None, T0)
    state = job_plan.ending(state, JobEnd.DENIED, "the owner refused a shell call")
    state = job_plan.ending(state, JobEnd.RUNTIME, "max_runtime_s 5 passed")
    assert state.open is not None and state.open.ending is JobEnd.DENIED


def test_the_state_file_reads_back_as_written_and_a_damaged_one_is_refused() -> None:
    state, _ = by_owner(job(), None, T0)
    states = {"j": job_plan.ending(state, JobEnd.RUNTIME, "x"), "k": JobState(5, 7)}
    assert job_plan.load(job_plan.dump(states)) == states
    with pytest.raises(ValueError, match="not a job state file"):
        job_plan.load(b'{"version": 1, "jobs": {"j": {"runs": 1}}}')
