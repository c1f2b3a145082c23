"""A bounded window of one session's turn events (SPEC §10.4, §12), as gatewayd holds them
between loopd's history and the `loop-events` stream: contiguous seqs `base+1 … last`.

Pure: no I/O, no clock. loopd's history is the truth; a window only saves asking it. A
window that may lag behind loopd (a gap in the stream, a reconnect) is `stale` until re-read.

What is held is counted as the memory it takes (`held`), not as its JSON: a text with one
character past Latin-1 (the "…" of a cut result) takes 2 or 4 bytes a character, and 4 windows
of 8 MiB of JSON took 67 MB (issue 28). All windows together hold at most `MAX_HELD`.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterable

from bxcore.bounded import Bounded
from bxcore.wire import codec as wire
from bxcore.wire.messages import TurnEvent
from services.gatewayd.held import held

MAX_EVENTS = 2_000
MAX_BYTES = 8 * 1024 * 1024  # held by one session's window (`held`)
MAX_HELD = 32 * 1024 * 1024  # held by all windows together
MAX_SESSIONS = 256
# An entry's own cost beside its event: the (event, size, held) tuple, its two ints and the
# deque's slot (sys.getsizeof: 64 + 2 * 28 + 8).
ENTRY = 128


class Took(enum.Enum):
    HELD = "held"  # the next event: now held
    OLD = "old"  # already held, or older than the window
    GAP = "gap"  # events are missing before it: the window is stale


class Window:
    """Events `base+1 … last` of one session, oldest dropped past `MAX_EVENTS`/`MAX_BYTES`."""

    def __init__(self, session: str) -> None:
        self.session = session
        self.base: int | None = None  # the seq before the first held; None: nothing known
        self.stale = True  # loopd may hold events after `last` that this window lacks
        self.gaps = 0  # how many times the stream skipped events
        self._held: deque[tuple[TurnEvent, int, int]] = deque()  # (event, JSON size, held)
        self.held = 0  # the bytes the events take in memory, their entries' too

    def __repr__(self) -> str:
        if self.base is None:
            return f"Window({self.session}: empty)"
        state = ", stale" if self.stale else ""
        return f"Window({self.session}: seq {self.base + 1}..{self.last}{state})"

    @property
    def last(self) -> int | None:
        return None if self.base is None else self.base + len(self._held)

    def covers(self, after: int) -> bool:
        """True when every event after `after` that this window knows of is held."""
        return self.base is not None and self.base <= after

    def start(self, after: int, events: Iterable[TurnEvent], *, complete: bool) -> None:
        """Begin (again) at `after` with loopd's events after it; `complete` when loopd had no
        more. Events that are not contiguous leave the window empty and stale."""
        self.base, self._held, self.held = after, deque(), 0
        self.stale = not complete
        for event in events:
            if self.take(event) is not Took.HELD:
                self.base, self._held, self.held, self.stale = None, deque(), 0, True
                return

    def take(self, event: TurnEvent) -> Took:
        """Hold `event` if it is the next one; a window that knew nothing begins with it."""
        if self.base is None:
            self.base = event.seq - 1
        last = self.base + len(self._held)
        if event.seq <= last:
            return Took.OLD
        if event.seq > last + 1:
            self.stale = True
            self.gaps += 1
            return Took.GAP
        cost = held(event) + ENTRY
        self._held.append((event, len(wire.encode(event)), cost))
        self.held += cost
        while len(self._held) > MAX_EVENTS or (self.held > MAX_BYTES and len(self._held) > 1):
            _, _, dropped = self._held.popleft()
            self.held -= dropped
            self.base += 1
        return Took.HELD

    def after(self, after: int, budget: int) -> tuple[tuple[TurnEvent, ...], bool]:
        """The held events after `after`, as many as fit in `budget` bytes (at least one), and
        whether more are held."""
        if self.base is None:
            return (), False
        start = max(0, after - self.base)
        found: list[TurnEvent] = []
        size = 0
        for index in range(start, len(self._held)):
            event, event_size, _ = self._held[index]
            size += event_size
            if found and size > budget:
                return tuple(found), True
            found.append(event)
        return tuple(found), False


class Windows:
    """The windows of the sessions seen lately, the least recently used dropped first: past
    `limit` sessions, and past `budget` bytes held by them all (`trim`)."""

    def __init__(self, limit: int = MAX_SESSIONS, budget: int = MAX_HELD) -> None:
        self._windows: Bounded[str, Window] = Bounded(limit, recency=True)
        self._budget = budget

    def __repr__(self) -> str:
        return f"Windows({len(self._windows)} sessions, {self.held} of {self._budget} bytes)"

    @property
    def held(self) -> int:
        return sum(window.held for window in self._windows.values())

    def trim(self, keep: Window) -> None:
        """After `keep` took events: drop the least recently used other windows while all of
        them hold more than the budget (one window alone holds at most `MAX_BYTES`)."""
        over = self.held - self._budget
        for session, window in list(self._windows.items()):
            if over <= 0:
                return
            if window is not keep:
                self._windows.pop(session)
                over -= window.held

    def get(self, session: str) -> Window:
        window = self._windows.get(session)
        if window is None:
            window = Window(session)
            self._windows.put(session, window)
        return window

    def all_stale(self) -> None:
        """After a reconnect: nothing held can be trusted to be the newest until re-read."""
        for window in self._windows.values():
            window.stale = True
