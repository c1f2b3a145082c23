"""When a job runs (SPEC §19): its slots, the next ones, and what a scheduler does at `now`.

Pure: no clock, no files. Every instant in and out is an aware `datetime`; out, in UTC. A
`schedule` (cron) is read in the `zone` given (the owner's: cron in local time is what owners
expect; DST as Debian's cron and cronsim do it, see docs/jobs.md); an `every` is a fixed
interval of real time, its slots the multiples of it since the Unix epoch, so they never drift
and a restart cannot move them.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, tzinfo

from cronsim import CronSim

from bxcore.frozen import frozen
from bxcore.jobs.job import CatchUp, Cron, Every, Job, Timing

#: A slot this late or less is still run as on time (a scheduler woken a little late, a slow
#: start); an older one was missed, and `catch_up` decides.
ON_TIME = timedelta(seconds=60)
#: Missed or overlapped slots are counted up to this many (after a long downtime an
#: every-minute cron has missed tens of thousands: the figure says "at least").
MAX_COUNTED = 1000


@frozen
class Due:
    """What a scheduler does for one job at `now`, having handled every slot up to `since`.

    `run`: start a run now; `slot` is the slot it is for, or None for a catch-up run (for
    `missed` slots). `missed`: slots that got no run of their own because they passed while
    nothing looked (the box was down). `overlapped`: slots skipped because the job's previous
    run was still going. Afterwards every slot up to `now` is handled."""

    run: bool = False
    slot: datetime | None = None
    missed: int = 0
    overlapped: int = 0

    @property
    def catch_up(self) -> bool:
        return self.run and self.slot is None


def next_runs(timing: Timing, zone: tzinfo, after: datetime, count: int) -> list[datetime]:
    """The first `count` slots strictly after `after` (fewer when the schedule ends)."""
    found: list[datetime] = []
    for slot in _slots_after(timing, zone, after):
        if len(found) == count:
            break
        found.append(slot)
    return found


def due(
    job: Job,
    zone: tzinfo,
    since: datetime,
    now: datetime,
    *,
    running: bool,
    on_time: timedelta = ON_TIME,
) -> Due:
    """Whether `job` runs at `now`, given that every slot up to `since` was handled and
    whether its previous run is still `running` (§19: a run never overlaps the previous one:
    a slot due meanwhile is skipped and counted, never queued).

    A disabled job does nothing and counts nothing: its slots are not missed, so enabling it
    again never catches up."""
    _aware(since, "since")
    _aware(now, "now")
    if not job.enabled or now <= since:
        return Due()
    boundary = max(since, now - on_time)
    late = _count(job.timing, zone, since, boundary)
    recent = _count(job.timing, zone, boundary, now)
    if running:
        return Due(overlapped=min(late + recent, MAX_COUNTED))
    if recent:
        latest = _latest(job.timing, zone, boundary, now)
        return Due(run=True, slot=latest, missed=min(late + recent - 1, MAX_COUNTED))
    if late and job.catch_up is CatchUp.ONCE:
        return Due(run=True, missed=late)
    return Due(missed=late)


def _aware(moment: datetime, name: str) -> None:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{name}: a naive datetime; the schedule needs an aware one")


def _slots_after(timing: Timing, zone: tzinfo, after: datetime) -> Iterator[datetime]:
    """Every slot strictly after `after`, in order, in UTC."""
    _aware(after, "after")
    if isinstance(timing, Every):
        first = int(after.timestamp() // timing.seconds + 1) * timing.seconds
        while True:
            yield datetime.fromtimestamp(first, UTC)
            first += timing.seconds
    yield from _cron_after(timing, zone, after)


def _cron_after(timing: Cron, zone: tzinfo, after: datetime) -> Iterator[datetime]:
    """cronsim's matches after `after`, in UTC. A match at or before the last one is dropped:
    started on the second pass of a repeated (autumn) hour, cronsim, which reads a fixed time
    as wall-clock time, would give that hour's first pass again, an hour in the past."""
    last = after
    for found in CronSim(timing.expression, after.astimezone(zone)):
        moment = found.astimezone(UTC)
        if moment > last:
            last = moment
            yield moment


def _count(timing: Timing, zone: tzinfo, start: datetime, end: datetime) -> int:
    """How many slots fall in (start, end], at most MAX_COUNTED."""
    if end <= start:
        return 0
    if isinstance(timing, Every):
        step = timing.seconds
        exact = int(end.timestamp() // step) - int(start.timestamp() // step)
        return min(exact, MAX_COUNTED)
    counted = 0
    for slot in _cron_after(timing, zone, start):
        if slot > end or counted == MAX_COUNTED:
            break
        counted += 1
    return counted


def _latest(timing: Timing, zone: tzinfo, start: datetime, end: datetime) -> datetime | None:
    """The last slot in (start, end] (a window of `on_time`: a few slots at most)."""
    latest = None
    for slot in _slots_after(timing, zone, start):
        if slot > end:
            break
        latest = slot
    return latest
