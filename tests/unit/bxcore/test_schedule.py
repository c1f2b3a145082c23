"""When a job runs (SPEC §19), with the clock in the test's hands: cron slots in the owner's
zone across both DST changes, `every` slots on the epoch, and what `due` decides at `now`
after a normal wait, a downtime (`catch_up`), a run still going (no overlap) or a disabled
job."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bxcore.jobs.job import CatchUp, Cron, Every, Job, Timing
from bxcore.jobs.schedule import MAX_COUNTED, ON_TIME, Due, due, next_runs

BERLIN = ZoneInfo("Europe/Berlin")  # DST 2026: 03-29 02:00 -> 03:00, 10-25 03:00 -> 02:00
NEW_YORK = ZoneInfo("America/New_York")


def at(text: str) -> datetime:
    """A UTC instant, like `2026-05-04 05:30`."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def job(timing: Timing, *, catch_up: CatchUp = CatchUp.ONCE, enabled: bool = True) -> Job:
    return Job("j", timing, "p", (), 24, 50_000, 1800, catch_up, enabled, "0" * 64)


WEEKDAYS_0730 = Cron("30 7 * * 1-5")


@pytest.mark.parametrize(
    ("timing", "zone", "after", "expected"),
    [
        # weekdays at 7:30 in Berlin: summer time is UTC+2; Friday evening -> Monday
        (WEEKDAYS_0730, BERLIN, "2026-05-01 12:00", ["2026-05-04 05:30", "2026-05-05 05:30"]),
        # in winter UTC+1
        (WEEKDAYS_0730, BERLIN, "2026-12-01 00:00", ["2026-12-01 06:30", "2026-12-02 06:30"]),
        # the same expression in UTC
        (WEEKDAYS_0730, UTC, "2026-05-01 12:00", ["2026-05-04 07:30", "2026-05-05 07:30"]),
        # a slot exactly at `after` is not after it
        (WEEKDAYS_0730, BERLIN, "2026-05-04 05:30", ["2026-05-05 05:30"]),
        # spring: 02:30 does not exist on 03-29; it runs once, at 03:00 (Debian cron)
        (Cron("30 2 * * *"), BERLIN, "2026-03-28 12:00", ["2026-03-29 01:00", "2026-03-30 00:30"]),
        # autumn: 02:30 happens twice on 10-25; it runs once, at the first
        (Cron("30 2 * * *"), BERLIN, "2026-10-24 12:00", ["2026-10-25 00:30", "2026-10-26 01:30"]),
        # ... even when asked during the repeated hour, before its second 02:30
        (Cron("30 2 * * *"), BERLIN, "2026-10-25 01:15", ["2026-10-26 01:30"]),
        # a frequent cron follows real time through both changes: no slot lost or doubled
        (
            Cron("*/30 * * * *"),
            BERLIN,
            "2026-03-29 00:20",
            ["2026-03-29 00:30", "2026-03-29 01:00", "2026-03-29 01:30"],
        ),
        (
            Cron("*/30 * * * *"),
            BERLIN,
            "2026-10-24 23:50",
            ["2026-10-25 00:00", "2026-10-25 00:30", "2026-10-25 01:00", "2026-10-25 01:30"],
        ),
        # New York's spring change (03-08 02:00 -> 03:00): 02:15 runs at 03:00
        (
            Cron("15 2 * * *"),
            NEW_YORK,
            "2026-03-07 12:00",
            ["2026-03-08 07:00", "2026-03-09 06:15"],
        ),
        # every: multiples of the interval since the epoch, whatever the zone
        (Every(1800, "30m"), BERLIN, "2026-05-01 12:10", ["2026-05-01 12:30", "2026-05-01 13:00"]),
        (Every(10, "10s"), UTC, "2026-05-01 12:00:05.5", ["2026-05-01 12:00:10"]),
        (Every(86_400, "1d"), BERLIN, "2026-05-01 12:00", ["2026-05-02 00:00"]),
    ],
)
def test_the_next_runs_are_the_schedules_slots_after_a_moment(
    timing: Timing, zone: ZoneInfo, after: str, expected: list[str]
) -> None:
    assert next_runs(timing, zone, at(after), len(expected)) == [at(e) for e in expected]
    assert next_run(timing, zone, at(after)) == at(expected[0])


def test_a_rare_cron_finds_its_next_run_decades_ahead() -> None:
    # a fifth Monday in February: 2044, 2072, then 2112 (2100 is no leap year)
    rare = Cron("0 0 * 2 mon#5")
    assert next_runs(rare, UTC, at("2045-01-01 00:00"), 2) == [
        at("2072-02-29 00:00"),
        at("2112-02-29 00:00"),
    ]


def test_a_naive_moment_is_refused() -> None:
    with pytest.raises(ValueError, match="naive"):
        next_run(WEEKDAYS_0730, BERLIN, datetime(2026, 5, 1))
    with pytest.raises(ValueError, match="naive"):
        due(job(WEEKDAYS_0730), BERLIN, at("2026-05-01 00:00"), datetime(2026, 5, 1), running=False)


MONDAY = "2026-05-04"  # 07:30 in Berlin is 05:30 UTC


@pytest.mark.parametrize(
    ("catch_up", "running", "since", "now", "expected"),
    [
        # nothing due yet
        ("once", False, f"{MONDAY} 05:00", f"{MONDAY} 05:29:59", Due()),
        # on time, or a little late: the run is for its slot
        ("once", False, f"{MONDAY} 05:29:59", f"{MONDAY} 05:30", Due(True, at(f"{MONDAY} 05:30"))),
        ("skip", False, f"{MONDAY} 05:29", f"{MONDAY} 05:30:45", Due(True, at(f"{MONDAY} 05:30"))),
        # the slot was handled already
        ("once", False, f"{MONDAY} 05:30", f"{MONDAY} 05:31", Due()),
        # the box was down at 07:30 and is back at 09:00: once runs now, skip does not
        ("once", False, f"{MONDAY} 05:00", f"{MONDAY} 07:00", Due(True, None, missed=1)),
        ("skip", False, f"{MONDAY} 05:00", f"{MONDAY} 07:00", Due(missed=1)),
        # down over the whole weekend and more: still one run (Fri, Mon, Tue missed)
        ("once", False, "2026-04-30 12:00", "2026-05-05 12:00", Due(True, None, missed=3)),
        ("skip", False, "2026-04-30 12:00", "2026-05-05 12:00", Due(missed=3)),
        # back just in time for the latest slot: it runs on time, the older ones were missed
        (
            "skip",
            False,
            "2026-05-01 04:00",
            f"{MONDAY} 05:30:10",
            Due(True, at(f"{MONDAY} 05:30"), 1),
        ),
        # the previous run is still going: the slot is skipped and counted, never queued
        ("once", True, f"{MONDAY} 05:29:59", f"{MONDAY} 05:30", Due(overlapped=1)),
        ("once", True, "2026-04-30 12:00", "2026-05-05 12:00", Due(overlapped=3)),
    ],
)
def test_due_runs_on_time_catches_up_as_told_and_never_overlaps(
    catch_up: str, running: bool, since: str, now: str, expected: Due
) -> None:
    weekly = job(WEEKDAYS_0730, catch_up=CatchUp(catch_up))
    assert due(weekly, BERLIN, at(since), at(now), running=running) == expected


def test_a_catch_up_run_has_no_slot_of_its_own() -> None:
    missed = due(
        job(WEEKDAYS_0730), BERLIN, at("2026-05-01 00:00"), at(f"{MONDAY} 09:00"), running=False
    )
    assert missed.run and missed.catch_up and missed.slot is None
    on_time = due(
        job(WEEKDAYS_0730), BERLIN, at(f"{MONDAY} 05:00"), at(f"{MONDAY} 05:30"), running=False
    )
    assert on_time.run and not on_time.catch_up


def test_a_disabled_job_neither_runs_nor_misses_anything() -> None:
    off = job(WEEKDAYS_0730, enabled=False)
    assert due(off, BERLIN, at("2026-04-01 00:00"), at(f"{MONDAY} 05:30"), running=False) == Due()


def test_a_clock_that_went_back_runs_nothing() -> None:
    assert (
        due(
            job(Every(10, "10s")),
            UTC,
            at("2026-05-01 12:00"),
            at("2026-05-01 11:00"),
            running=False,
        )
        == Due()
    )


def test_an_every_job_ticked_each_second_runs_once_a_slot() -> None:
    every = job(Every(10, "10s"))
    since, runs = at("2026-05-01 12:00:00"), []
    for second in range(1, 61):
        now = at("2026-05-01 12:00:00") + timedelta(seconds=second)
        decided = due(every, UTC, since, now, running=False)
        if decided.run:
            runs.append(decided.slot)
        since = now
    assert runs == [at("2026-05-01 12:00:00") + timedelta(seconds=s) for s in range(10, 61, 10)]


def test_an_every_job_back_after_a_downtime_runs_its_latest_slot_and_counts_the_rest() -> None:
    every = job(Every(10, "10s"), catch_up=CatchUp.SKIP)
    decided = due(every, UTC, at("2026-05-01 12:00"), at("2026-05-01 12:05:03"), running=False)
    assert decided == Due(True, at("2026-05-01 12:05:00"), missed=29)
    # the on-time window is an argument: with none, all 30 were missed
    strict = due(
        every,
        UTC,
        at("2026-05-01 12:00"),
        at("2026-05-01 12:05:03"),
        running=False,
        on_time=timedelta(0),
    )
    assert strict == Due(missed=30)
    assert timedelta(seconds=59) < ON_TIME


def test_a_long_downtime_is_counted_up_to_a_limit() -> None:
    minutely = job(Cron("* * * * *"), catch_up=CatchUp.SKIP)
    decided = due(
        minutely, BERLIN, at("2026-05-01 00:00"), at("2026-05-03 00:00:30"), running=False
    )
    assert decided.run and decided.slot == at("2026-05-03 00:00")
    assert decided.missed == MAX_COUNTED
    every = due(
        job(Every(1, "1s")), UTC, at("2026-05-01 00:00"), at("2026-05-02 00:00"), running=True
    )
    assert every.overlapped == MAX_COUNTED


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["30 2 * * *", "*/20 * * * *", "0 1-3 * * *", "30 7 * * 1-5", "0 0 L * *"]),
    st.sampled_from([BERLIN, NEW_YORK, UTC]),
    st.datetimes(datetime(2026, 1, 1), datetime(2030, 12, 31), timezones=st.just(UTC)),
)
def test_next_runs_are_strictly_after_and_increasing_across_any_dst_change(
    expression: str, zone: ZoneInfo, after: datetime
) -> None:
    runs = next_runs(Cron(expression), zone, after, 4)
    assert len(runs) == 4
    assert after < runs[0] < runs[1] < runs[2] < runs[3]
    assert next_run(Cron(expression), zone, runs[0]) == runs[1]  # a restart right after a run


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from([Every(10, "10s"), Every(3600, "1h"), Cron("*/5 * * * *"), WEEKDAYS_0730]),
    st.sampled_from(list(CatchUp)),
    st.booleans(),
    st.datetimes(datetime(2026, 1, 1), datetime(2026, 12, 31), timezones=st.just(UTC)),
    st.timedeltas(timedelta(0), timedelta(days=9)),
)
def test_a_run_is_for_a_slot_between_since_and_now_and_every_slot_is_accounted_for(
    timing: Timing, catch_up: CatchUp, running: bool, since: datetime, gap: timedelta
) -> None:
    now = since + gap
    decided = due(job(timing, catch_up=catch_up), BERLIN, since, now, running=running)
    slots = [s for s in next_runs(timing, BERLIN, since, MAX_COUNTED + 1) if s <= now]
    if decided.slot is not None:
        assert since < decided.slot <= now  # and the latest slot: none after it yet
        following = next_run(timing, BERLIN, decided.slot)
        assert following is not None and following > now
    accounted = decided.missed + decided.overlapped + (1 if decided.slot is not None else 0)
    if decided.catch_up:
        assert decided.missed >= 1
    assert accounted == min(len(slots), MAX_COUNTED) or len(slots) > MAX_COUNTED
    assert not (running and decided.run)


def next_run(timing: Timing, zone: tzinfo, after: datetime) -> datetime | None:
    """The first slot strictly after `after`, as `bxctl job list` finds it."""
    found = next_runs(timing, zone, after, 1)
    return found[0] if found else None
