"""The jobs' states on a full disk (issue 28): a state that cannot be written starts no run and
does not stop loopd; the run starts once the state can be written, with the number it would
have had, and `bxctl job run` is refused with the disk's sentence meanwhile."""

from __future__ import annotations

import errno
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest

from bxcore.client import Client
from bxcore.config.file import Config
from bxcore.home.layout import Home
from services.loopd import scheduler as scheduler_module
from services.loopd.scheduler import NotStarted, Scheduler
from services.loopd.sessions import Sessions
from services.loopd.turn import Turns

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class Tasks:
    """Stands in for the task group: remembers what would have started."""

    def __init__(self) -> None:
        self.started: list[tuple[Any, ...]] = []

    def start_soon(self, *what: Any) -> None:
        self.started.append(what)


class Full:
    """Stands in for `write_atomically` on a full disk; counts the writes tried."""

    def __init__(self) -> None:
        self.tried = 0

    def __call__(self, *_: Any, **__: Any) -> None:
        self.tried += 1
        raise OSError(errno.ENOSPC, "No space left on device")


def a_scheduler(tmp_path: Path) -> tuple[Scheduler, Tasks]:
    home = Home(tmp_path)
    home.jobs.mkdir(mode=0o700)
    (home.jobs / "daily.toml").write_text('every = "2s"\nprompt = "p"\n')
    sessions = Sessions(home)
    turns = Turns(Config(), cast(Any, None), cast(Any, None), sessions.held, print, sessions.exists)
    ticks = iter(range(1000))  # each look at the clock is 3 s later: a slot falls due each tick
    found = Scheduler(
        home, sessions, turns, lambda: cast(Client, None), UTC,
        lambda: NOW + timedelta(seconds=3 * next(ticks)),
    )  # fmt: skip
    tasks = Tasks()
    found._tasks = cast(Any, tasks)
    return found, tasks


def test_a_state_the_disk_has_no_room_for_starts_no_run_until_it_can_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scheduler, tasks = a_scheduler(tmp_path)
    real = scheduler_module.write_atomically
    full = Full()
    monkeypatch.setattr(scheduler_module, "write_atomically", full)
    scheduler.tick()
    scheduler.tick()
    assert tasks.started == [] and full.tried == 2  # a run fell due each time
    assert not Home(tmp_path).job_runs.exists()
    with pytest.raises(NotStarted, match=r"the run could not be started: the disk holding .* full"):
        scheduler.run_now("daily")
    assert tasks.started == []

    monkeypatch.setattr(scheduler_module, "write_atomically", real)
    scheduler.tick()
    assert len(tasks.started) == 1
    assert tasks.started[0][1:] == ("daily", tasks.started[0][2])
    assert tasks.started[0][2].run == 1  # the number no failed write took
    assert Home(tmp_path).job_runs.exists()
