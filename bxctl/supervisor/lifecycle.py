"""A supervised service's life (SPEC §13) as a table of (state, event) -> outcome, and the
restart rules: backoff doubling from 0.5 s to 30 s, reset after 30 s of stable running,
`failed` past 5 restarts in 60 s, and `failed` at once for a start no restart can mend.
Pure: no I/O, no clock (`now`, in seconds from any monotonic origin, is passed in), no
processes. Only this table moves a service's state.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from bxcore.wire.messages import ServiceState

STARTING = ServiceState.STARTING
RUNNING = ServiceState.RUNNING
BACKOFF = ServiceState.BACKOFF
STOPPING = ServiceState.STOPPING
STOPPED = ServiceState.STOPPED
FAILED = ServiceState.FAILED


class Event(enum.StrEnum):
    START = "start"  # the box comes up: the service should run
    READY = "ready"  # its process answered `ping`
    NOT_READY = "not_ready"  # no `pong` before the readiness deadline (10 s)
    EXITED = "exited"  # its process ended, however it ended
    # ... saying that only the owner can mend it (exit 78: a socket path taken, a key missing)
    CANNOT_START = "cannot_start"
    BACKOFF_OVER = "backoff_over"  # the wait before the next start is over
    STOP = "stop"  # the owner's stop (of this service or of the whole box)
    RESTART = "restart"  # the owner's restart


class Action(enum.StrEnum):
    """What the shell must do after a step."""

    NOTHING = "nothing"
    SPAWN = "spawn"  # start the process, and probe it for readiness
    TERMINATE = "terminate"  # SIGTERM to its group, the grace, then SIGKILL
    WAIT = "wait"  # deliver BACKOFF_OVER at `life.retry_at`


class Then(enum.StrEnum):
    """What a `stopping` service becomes once its process has exited."""

    STOP = "stop"  # `stopped`, and it stays so: the owner's stop is never undone
    RESTART = "restart"  # `starting` at once: the owner asked for a restart
    RETRY = "retry"  # the restart rule: it would not answer, so it counts as a crash


class Rule(enum.Enum):
    """A table cell whose outcome depends on the life's data, not only on its state."""

    IGNORE = "ignore"  # a late, stale or repeated event: nothing changes
    RETRY = "retry"  # an exit nobody asked for: `backoff`, or `failed` past the limit
    SETTLE = "settle"  # the process ended while stopping: do what `then` says
    WAKE = "wake"  # the backoff is over: start again, if it is due


@dataclass(frozen=True)
class Go:
    """A table cell with a fixed outcome."""

    state: ServiceState
    action: Action = Action.NOTHING
    then: Then | None = None


Outcome = Go | Rule

_I = Rule.IGNORE
_SPAWN = Go(STARTING, Action.SPAWN)

TABLE: Mapping[tuple[ServiceState, Event], Outcome] = MappingProxyType(
    {
        # stopped: only the owner (or the box coming up) starts it
        (STOPPED, Event.START): _SPAWN,
        (STOPPED, Event.READY): _I,
        (STOPPED, Event.NOT_READY): _I,
        (STOPPED, Event.EXITED): _I,
        (STOPPED, Event.CANNOT_START): _I,
        (STOPPED, Event.BACKOFF_OVER): _I,
        (STOPPED, Event.STOP): _I,
        (STOPPED, Event.RESTART): _SPAWN,
        # starting: a process exists and is probed
        (STARTING, Event.START): _I,
        (STARTING, Event.READY): Go(RUNNING),
        (STARTING, Event.NOT_READY): Go(STOPPING, Action.TERMINATE, Then.RETRY),
        (STARTING, Event.EXITED): Rule.RETRY,
        (STARTING, Event.CANNOT_START): Go(FAILED),  # no restart can mend it: say so now
        (STARTING, Event.BACKOFF_OVER): _I,
        (STARTING, Event.STOP): Go(STOPPING, Action.TERMINATE, Then.STOP),
        (STARTING, Event.RESTART): Go(STOPPING, Action.TERMINATE, Then.RESTART),
        # running
        (RUNNING, Event.START): _I,
        (RUNNING, Event.READY): _I,
        (RUNNING, Event.NOT_READY): _I,
        (RUNNING, Event.EXITED): Rule.RETRY,
        (RUNNING, Event.CANNOT_START): Rule.RETRY,  # it did start once: a plain crash
        (RUNNING, Event.BACKOFF_OVER): _I,
        (RUNNING, Event.STOP): Go(STOPPING, Action.TERMINATE, Then.STOP),
        (RUNNING, Event.RESTART): Go(STOPPING, Action.TERMINATE, Then.RESTART),
        # backoff: no process; a timer is pending
        (BACKOFF, Event.START): _I,
        (BACKOFF, Event.READY): _I,
        (BACKOFF, Event.NOT_READY): _I,
        (BACKOFF, Event.EXITED): _I,
        (BACKOFF, Event.CANNOT_START): _I,
        (BACKOFF, Event.BACKOFF_OVER): Rule.WAKE,
        (BACKOFF, Event.STOP): Go(STOPPED),
        (BACKOFF, Event.RESTART): _SPAWN,
        # stopping: the process was asked to end; `then` says what comes after
        (STOPPING, Event.START): _I,
        (STOPPING, Event.READY): _I,
        (STOPPING, Event.NOT_READY): _I,
        (STOPPING, Event.EXITED): Rule.SETTLE,
        (STOPPING, Event.CANNOT_START): Rule.SETTLE,
        (STOPPING, Event.BACKOFF_OVER): _I,
        (STOPPING, Event.STOP): Go(STOPPING, then=Then.STOP),
        (STOPPING, Event.RESTART): Go(STOPPING, then=Then.RESTART),
        # failed: no process, no more automatic restarts; the owner may restart it
        (FAILED, Event.START): _I,
        (FAILED, Event.READY): _I,
        (FAILED, Event.NOT_READY): _I,
        (FAILED, Event.EXITED): _I,
        (FAILED, Event.CANNOT_START): _I,
        (FAILED, Event.BACKOFF_OVER): _I,
        (FAILED, Event.STOP): Go(STOPPED),
        (FAILED, Event.RESTART): _SPAWN,
    }
)


@dataclass(frozen=True)
class Policy:
    """The restart rules' numbers (SPEC §13); `stable_after` is ours (docs/decisions.md)."""

    first_backoff: float = 0.5
    max_backoff: float = 30.0
    window: float = 60.0
    max_restarts: int = 5  # more than this many restarts within `window` -> failed
    stable_after: float = 30.0  # running this long resets the backoff to `first_backoff`


POLICY = Policy()


@dataclass(frozen=True)
class ServiceLife:
    """One service's state and the history the restart rules read."""

    state: ServiceState = STOPPED
    since: float = 0.0  # when it entered `state`
    then: Then | None = None  # in `stopping` only
    backoff: float = 0.0  # the last wait before a restart; 0: none since the last reset
    retry_at: float | None = None  # in `backoff` only
    recent: tuple[float, ...] = field(default=())  # automatic restarts within the window
    restarts: int = 0  # automatic restarts, ever
    running_since: float | None = None  # when it last became ready, while it runs

    def __repr__(self) -> str:
        extra = ""
        if self.then is not None:
            extra = f", then {self.then}"
        if self.retry_at is not None:
            extra = f", retry at {self.retry_at:.3f} (waited {self.backoff:g} s)"
        return f"ServiceLife({self.state}{extra}, {self.restarts} restarts)"


def step(
    life: ServiceLife, event: Event, now: float, policy: Policy = POLICY
) -> tuple[ServiceLife, Action]:
    """The life after `event` at `now`, and what the shell must do."""
    outcome = TABLE[(life.state, event)]
    if isinstance(outcome, Go):
        return _go(life, outcome, event, now)
    if outcome is Rule.IGNORE:
        return life, Action.NOTHING
    if outcome is Rule.RETRY:
        return _retry(life, now, policy)
    if outcome is Rule.WAKE:
        if life.retry_at is not None and now < life.retry_at:
            return life, Action.NOTHING  # a timer from an earlier backoff
        return _enter(life, STARTING, now), Action.SPAWN
    # Rule.SETTLE
    if life.then is Then.RESTART:
        return _enter(life, STARTING, now), Action.SPAWN
    if life.then is Then.RETRY:
        return _retry(life, now, policy)
    return _enter(life, STOPPED, now), Action.NOTHING


def _go(life: ServiceLife, go: Go, event: Event, now: float) -> tuple[ServiceLife, Action]:
    if event is Event.RESTART:  # the owner's restart: a fresh budget and a short backoff
        life = replace(life, recent=(), backoff=0.0)
    if go.state is life.state:  # stopping: only `then` changes
        return replace(life, then=go.then), go.action
    life = _enter(life, go.state, now, then=go.then)
    if go.state is RUNNING:
        life = replace(life, running_since=now)
    return life, go.action


def _enter(
    life: ServiceLife, state: ServiceState, now: float, *, then: Then | None = None
) -> ServiceLife:
    running_since = life.running_since if state in (RUNNING, STOPPING) else None
    return replace(
        life, state=state, since=now, then=then, retry_at=None, running_since=running_since
    )


def _retry(life: ServiceLife, now: float, policy: Policy) -> tuple[ServiceLife, Action]:
    """An exit nobody asked for: wait and start again, or give up past the limit."""
    stable = life.running_since is not None and now - life.running_since >= policy.stable_after
    recent = tuple(t for t in life.recent if now - t < policy.window)
    if len(recent) + 1 > policy.max_restarts:
        return replace(_enter(life, FAILED, now), recent=recent), Action.NOTHING
    if stable or life.backoff <= 0:
        delay = policy.first_backoff
    else:
        delay = min(life.backoff * 2, policy.max_backoff)
    after = _enter(life, BACKOFF, now)
    after = replace(
        after,
        backoff=delay,
        retry_at=now + delay,
        recent=(*recent, now),
        restarts=life.restarts + 1,
    )
    return after, Action.WAIT


def table_markdown() -> str:
    """The table as Markdown, for the docs: one row a state, one column an event."""
    events = list(Event)
    lines = [
        "| state | " + " | ".join(e.value for e in events) + " |",
        "|---" * (len(events) + 1) + "|",
    ]
    for state in ServiceState:
        cells = []
        for event in events:
            outcome = TABLE[(state, event)]
            if isinstance(outcome, Rule):
                cells.append("·" if outcome is Rule.IGNORE else f"*{outcome.value}*")
            else:
                text = outcome.state.value
                if outcome.action is not Action.NOTHING:
                    text += f" ({outcome.action.value})"
                if outcome.then is not None:
                    text += f", then {outcome.then.value}"
                cells.append(text)
        lines.append(f"| {state.value} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
