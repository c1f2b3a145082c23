"""The supervisor's lifecycle table and restart rules (SPEC §13), with a clock made of numbers:
every (state, event) pair, the backoff's doubling and reset, `failed` past 5 restarts in 60 s,
and the owner's stop that nothing undoes. Pure: each test runs in microseconds.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

import pytest

from bxcore.wire.messages import ServiceState
from bxctl.supervisor.lifecycle import (
    POLICY,
    TABLE,
    Action,
    Event,
    Policy,
    ServiceLife,
    Then,
    step,
    table_markdown,
)

S = ServiceState
E = Event
A = Action


def walk(life: ServiceLife, events: Iterable[tuple[Event, float]]) -> ServiceLife:
    for event, now in events:
        life, _ = step(life, event, now)
    return life


FRESH = ServiceLife()
STARTING = walk(FRESH, [(E.START, 0.0)])
RUNNING = walk(STARTING, [(E.READY, 1.0)])
BACKOFF = walk(RUNNING, [(E.EXITED, 2.0)])  # retry at 2.5
STOPPING = walk(RUNNING, [(E.STOP, 2.0)])  # the owner's stop
STOPPED = walk(STOPPING, [(E.EXITED, 2.1)])


def crash_loop(life: ServiceLife, start: float, times: int) -> tuple[ServiceLife, float]:
    """Crash at once on every start, waking exactly when the backoff ends."""
    now = start
    for _ in range(times):
        life, action = step(life, E.EXITED, now)
        if action is not A.WAIT:
            break
        assert life.retry_at is not None
        now = life.retry_at
        life, _ = step(life, E.BACKOFF_OVER, now)
    return life, now


FAILED, _ = crash_loop(STARTING, 0.0, 6)
AT = {S.STOPPED: 10.0, S.STARTING: 10.0, S.RUNNING: 10.0, S.STOPPING: 10.0, S.FAILED: 30.0}
SAMPLE = {
    S.STOPPED: STOPPED,
    S.STARTING: STARTING,
    S.RUNNING: RUNNING,
    S.BACKOFF: BACKOFF,
    S.STOPPING: STOPPING,
    S.FAILED: FAILED,
}

# What each pair does to the sample life above, written out by hand (not read from TABLE).
EXPECTED: dict[tuple[ServiceState, Event], tuple[ServiceState, Action]] = {
    (S.STOPPED, E.START): (S.STARTING, A.SPAWN),
    (S.STOPPED, E.READY): (S.STOPPED, A.NOTHING),
    (S.STOPPED, E.NOT_READY): (S.STOPPED, A.NOTHING),
    (S.STOPPED, E.EXITED): (S.STOPPED, A.NOTHING),
    (S.STOPPED, E.CANNOT_START): (S.STOPPED, A.NOTHING),
    (S.STOPPED, E.BACKOFF_OVER): (S.STOPPED, A.NOTHING),
    (S.STOPPED, E.STOP): (S.STOPPED, A.NOTHING),
    (S.STOPPED, E.RESTART): (S.STARTING, A.SPAWN),
    (S.STARTING, E.START): (S.STARTING, A.NOTHING),
    (S.STARTING, E.READY): (S.RUNNING, A.NOTHING),
    (S.STARTING, E.NOT_READY): (S.STOPPING, A.TERMINATE),
    (S.STARTING, E.EXITED): (S.BACKOFF, A.WAIT),
    (S.STARTING, E.CANNOT_START): (S.FAILED, A.NOTHING),
    (S.STARTING, E.BACKOFF_OVER): (S.STARTING, A.NOTHING),
    (S.STARTING, E.STOP): (S.STOPPING, A.TERMINATE),
    (S.STARTING, E.RESTART): (S.STOPPING, A.TERMINATE),
    (S.RUNNING, E.START): (S.RUNNING, A.NOTHING),
    (S.RUNNING, E.READY): (S.RUNNING, A.NOTHING),
    (S.RUNNING, E.NOT_READY): (S.RUNNING, A.NOTHING),
    (S.RUNNING, E.EXITED): (S.BACKOFF, A.WAIT),
    (S.RUNNING, E.CANNOT_START): (S.BACKOFF, A.WAIT),
    (S.RUNNING, E.BACKOFF_OVER): (S.RUNNING, A.NOTHING),
    (S.RUNNING, E.STOP): (S.STOPPING, A.TERMINATE),
    (S.RUNNING, E.RESTART): (S.STOPPING, A.TERMINATE),
    (S.BACKOFF, E.START): (S.BACKOFF, A.NOTHING),
    (S.BACKOFF, E.READY): (S.BACKOFF, A.NOTHING),
    (S.BACKOFF, E.NOT_READY): (S.BACKOFF, A.NOTHING),
    (S.BACKOFF, E.EXITED): (S.BACKOFF, A.NOTHING),
    (S.BACKOFF, E.CANNOT_START): (S.BACKOFF, A.NOTHING),
    (S.BACKOFF, E.BACKOFF_OVER): (S.STARTING, A.SPAWN),  # at 10 s: long due
    (S.BACKOFF, E.STOP): (S.STOPPED, A.NOTHING),
    (S.BACKOFF, E.RESTART): (S.STARTING, A.SPAWN),
    (S.STOPPING, E.START): (S.STOPPING, A.NOTHING),
    (S.STOPPING, E.READY): (S.STOPPING, A.NOTHING),
    (S.STOPPING, E.NOT_READY): (S.STOPPING, A.NOTHING),
    (S.STOPPING, E.EXITED): (S.STOPPED, A.NOTHING),  # the owner's stop
    (S.STOPPING, E.CANNOT_START): (S.STOPPED, A.NOTHING),
    (S.STOPPING, E.BACKOFF_OVER): (S.STOPPING, A.NOTHING),
    (S.STOPPING, E.STOP): (S.STOPPING, A.NOTHING),
    (S.STOPPING, E.RESTART): (S.STOPPING, A.NOTHING),  # then starting, once it has exited
    (S.FAILED, E.START): (S.FAILED, A.NOTHING),
    (S.FAILED, E.READY): (S.FAILED, A.NOTHING),
    (S.FAILED, E.NOT_READY): (S.FAILED, A.NOTHING),
    (S.FAILED, E.EXITED): (S.FAILED, A.NOTHING),
    (S.FAILED, E.CANNOT_START): (S.FAILED, A.NOTHING),
    (S.FAILED, E.BACKOFF_OVER): (S.FAILED, A.NOTHING),
    (S.FAILED, E.STOP): (S.STOPPED, A.NOTHING),
    (S.FAILED, E.RESTART): (S.STARTING, A.SPAWN),
}


def test_the_table_has_one_cell_for_every_state_and_event() -> None:
    assert set(TABLE) == set(itertools.product(ServiceState, Event))
    assert set(EXPECTED) == set(TABLE)


def test_the_samples_are_in_the_states_they_stand_for() -> None:
    for state, life in SAMPLE.items():
        assert life.state is state, life


@pytest.mark.parametrize(("state", "event"), sorted(EXPECTED, key=str))
def test_every_cell_of_the_table(state: ServiceState, event: Event) -> None:
    after, action = step(SAMPLE[state], event, AT.get(state, 10.0))
    assert (after.state, action) == EXPECTED[(state, event)]


@pytest.mark.parametrize(("state", "event"), sorted(EXPECTED, key=str))
def test_an_ignored_event_changes_nothing(state: ServiceState, event: Event) -> None:
    before = SAMPLE[state]
    after, action = step(before, event, AT.get(state, 10.0))
    if EXPECTED[(state, event)] == (state, A.NOTHING) and state is not S.STOPPING:
        assert after == before and action is A.NOTHING


def test_the_table_renders_as_markdown_with_a_row_a_state() -> None:
    text = table_markdown()
    assert len(text.splitlines()) == 2 + len(ServiceState)
    assert "| running |" in text and "backoff_over" in text


# -- the backoff -----------------------------------------------------------------------------------


def test_the_backoff_doubles_from_half_a_second() -> None:
    life, now, waits = STARTING, 0.0, []
    for _ in range(5):
        life, action = step(life, E.EXITED, now)
        assert action is A.WAIT and life.state is S.BACKOFF
        assert life.retry_at is not None
        waits.append(life.retry_at - now)
        now = life.retry_at
        life, action = step(life, E.BACKOFF_OVER, now)
        assert action is A.SPAWN
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0]
    assert life.restarts == 5


def test_the_backoff_stops_growing_at_30_seconds() -> None:
    # Runs 20 s each time (not stable, and never 5 restarts in 60 s): the wait caps at 30 s.
    life, now, waits = STARTING, 0.0, []
    for _ in range(9):
        life, _ = step(life, E.READY, now + 0.1)
        now += 20.0
        life, action = step(life, E.EXITED, now)
        assert action is A.WAIT, life
        assert life.retry_at is not None
        waits.append(life.retry_at - now)
        now = life.retry_at
        life, _ = step(life, E.BACKOFF_OVER, now)
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]


def test_30_seconds_of_stable_running_resets_the_backoff() -> None:
    life, now = crash_loop(STARTING, 0.0, 4)  # waits 0.5, 1, 2, 4: the next would be 8
    life, _ = step(life, E.READY, now + 0.2)
    life, _ = step(life, E.EXITED, now + 0.2 + POLICY.stable_after)
    assert life.state is S.BACKOFF and life.backoff == 0.5


def test_29_seconds_of_running_is_not_stable() -> None:
    life, now = crash_loop(STARTING, 0.0, 2)  # waits 0.5, 1
    life, _ = step(life, E.READY, now)
    life, _ = step(life, E.EXITED, now + 29.0)
    assert life.backoff == 2.0


def test_a_backoff_timer_that_fires_early_is_ignored() -> None:
    assert BACKOFF.retry_at == 2.5
    life, action = step(BACKOFF, E.BACKOFF_OVER, 2.499)
    assert (life, action) == (BACKOFF, A.NOTHING)
    life, action = step(BACKOFF, E.BACKOFF_OVER, 2.5)
    assert (life.state, action) == (S.STARTING, A.SPAWN)


# -- failed ----------------------------------------------------------------------------------------


def test_the_sixth_exit_within_60_seconds_marks_it_failed_and_it_is_not_restarted() -> None:
    life, now = crash_loop(STARTING, 0.0, 5)
    assert life.state is S.STARTING and life.restarts == 5 and now == 15.5
    life, action = step(life, E.EXITED, now)
    assert (life.state, action) == (S.FAILED, A.NOTHING)
    for event in (E.BACKOFF_OVER, E.EXITED, E.READY, E.NOT_READY, E.START):
        assert step(life, event, now + 100.0) == (life, A.NOTHING)


def test_five_restarts_spread_over_more_than_60_seconds_never_fail() -> None:
    life, now = STARTING, 0.0
    for _ in range(20):
        life, _ = step(life, E.READY, now)
        now += 13.0  # ran 13 s: at most 5 exits fall in any 60 s
        life, action = step(life, E.EXITED, now)
        assert action is A.WAIT, life
        assert life.retry_at is not None
        now = life.retry_at
        life, _ = step(life, E.BACKOFF_OVER, now)
    assert life.state is S.STARTING and life.restarts == 20
    assert len(life.recent) <= POLICY.max_restarts


def test_restarts_older_than_the_window_are_forgotten() -> None:
    life, now = crash_loop(STARTING, 0.0, 5)  # 5 restarts by 15.5 s
    life, _ = step(life, E.READY, now)
    life, action = step(life, E.EXITED, 61.0)  # the first restart (at 0 s) is out of the window
    assert (life.state, action) == (S.BACKOFF, A.WAIT)


def test_a_service_that_never_answers_is_stopped_and_counted_as_a_crash() -> None:
    life, action = step(STARTING, E.NOT_READY, 10.0)
    assert (life.state, action, life.then) == (S.STOPPING, A.TERMINATE, Then.RETRY)
    life, action = step(life, E.EXITED, 10.2)
    assert (life.state, action, life.restarts) == (S.BACKOFF, A.WAIT, 1)


def test_a_start_no_restart_can_mend_is_failed_at_once_and_counts_no_restart() -> None:
    life, action = step(STARTING, E.CANNOT_START, 0.3)
    assert (life.state, action, life.restarts) == (S.FAILED, A.NOTHING, 0)
    for event in (E.BACKOFF_OVER, E.EXITED, E.READY, E.NOT_READY, E.START):
        assert step(life, event, 100.0) == (life, A.NOTHING)
    life, action = step(life, E.RESTART, 120.0)  # the owner mended it: a start as any other
    assert (life.state, action) == (S.STARTING, A.SPAWN)


def test_a_running_service_that_exits_saying_it_cannot_start_is_restarted_as_a_crash() -> None:
    life, action = step(RUNNING, E.CANNOT_START, 5.0)
    assert (life.state, action, life.restarts) == (S.BACKOFF, A.WAIT, 1)


def test_the_owners_restart_of_a_failed_service_gives_it_a_fresh_budget() -> None:
    life, action = step(FAILED, E.RESTART, 40.0)
    assert (life.state, action) == (S.STARTING, A.SPAWN)
    assert life.recent == () and life.backoff == 0.0
    life, action = step(life, E.EXITED, 40.25)
    assert (life.state, action, life.retry_at) == (S.BACKOFF, A.WAIT, 40.75)


def test_a_custom_policy_is_followed() -> None:
    policy = Policy(first_backoff=0.01, max_backoff=0.04, window=1.0, max_restarts=2)
    life, now = STARTING, 0.0
    waits = []
    for _ in range(2):
        life, _ = step(life, E.EXITED, now, policy)
        assert life.retry_at is not None
        waits.append(round(life.retry_at - now, 6))
        now = life.retry_at
        life, _ = step(life, E.BACKOFF_OVER, now, policy)
    life, action = step(life, E.EXITED, now, policy)
    assert waits == [0.01, 0.02] and (life.state, action) == (S.FAILED, A.NOTHING)


# -- the owner's stop ------------------------------------------------------------------------------

SYSTEM_EVENTS = (E.READY, E.NOT_READY, E.EXITED, E.BACKOFF_OVER, E.START)


@pytest.mark.parametrize("state", [S.STARTING, S.RUNNING, S.BACKOFF, S.FAILED])
def test_the_owners_stop_is_never_undone_by_the_system(state: ServiceState) -> None:
    life, _ = step(SAMPLE[state], E.STOP, 10.0)
    life, _ = step(life, E.EXITED, 10.1)  # the process ends (ignored where there is none)
    assert life.state is S.STOPPED
    now = 10.2
    for event in SYSTEM_EVENTS[:-1] * 3:
        now += 100.0
        life, action = step(life, event, now)
        assert life.state is S.STOPPED and action is A.NOTHING


def test_an_exit_while_stopping_is_not_restarted() -> None:
    life, action = step(STOPPING, E.EXITED, 3.0)
    assert (life.state, action, life.restarts) == (S.STOPPED, A.NOTHING, 0)


def test_the_owners_stop_wins_over_a_pending_retry() -> None:
    life, _ = step(STARTING, E.NOT_READY, 10.0)  # stopping, then retry
    life, action = step(life, E.STOP, 10.1)
    assert (life.state, action, life.then) == (S.STOPPING, A.NOTHING, Then.STOP)
    life, action = step(life, E.EXITED, 10.2)
    assert (life.state, action) == (S.STOPPED, A.NOTHING)


def test_a_stop_in_backoff_cancels_the_pending_start() -> None:
    life, _ = step(BACKOFF, E.STOP, 2.1)
    assert life.state is S.STOPPED and life.retry_at is None
    assert step(life, E.BACKOFF_OVER, 2.5) == (life, A.NOTHING)


def test_the_owners_restart_of_a_running_service_stops_then_starts_it_without_a_count() -> None:
    life, action = step(RUNNING, E.RESTART, 5.0)
    assert (life.state, action, life.then) == (S.STOPPING, A.TERMINATE, Then.RESTART)
    life, action = step(life, E.EXITED, 5.1)
    assert (life.state, action, life.restarts) == (S.STARTING, A.SPAWN, 0)


def test_the_owners_restart_while_stopping_starts_it_once_it_has_exited() -> None:
    life, action = step(STOPPING, E.RESTART, 2.05)
    assert (life.state, action, life.then) == (S.STOPPING, A.NOTHING, Then.RESTART)
    life, action = step(life, E.EXITED, 2.1)
    assert (life.state, action) == (S.STARTING, A.SPAWN)


def test_since_is_when_the_state_was_entered_and_repr_says_the_state() -> None:
    assert (STARTING.since, RUNNING.since, BACKOFF.since) == (0.0, 1.0, 2.0)
    assert RUNNING.running_since == 1.0 and BACKOFF.running_since is None
    assert "backoff" in repr(BACKOFF) and "retry at 2.500" in repr(BACKOFF)
    assert "then stop" in repr(STOPPING)
