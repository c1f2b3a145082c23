"""Token accounting (SPEC §19, issue 16): the box's tokens per day, and the two budgets that end
a turn: the turn's own (`Turns.run`'s `max_tokens`, a job's) and the box's for the day
(`[loop] max_tokens_per_day`). Pure but for `Meter`, which reads the clock it is given. The
figures come from the histories (`history.py`): read at loopd's start, added to as each answer
is recorded, so that they survive restarts.

A day is the machine's local day (`bxcore.clock.local_zone`), midnight to midnight, as the
owner lives it. A figure keeps the UTC time it was recorded at, so each is counted on the day
it falls on in the zone loopd runs in.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable

from bxcore.clock import now_ms, rfc3339
from services.loopd.history_records import Spent
from services.loopd.model import Usage

KEPT_DAYS = 31  # days a tally remembers (the newest); only today's is ever asked for now

#: What the model reads for each call of the answer that spent the budget (it never runs).
BUDGET_RESULT = "Not run: the token budget is spent, so the turn ended here."


def day_of(at_ms: int, zone: datetime.tzinfo) -> str:
    """The local day (`2026-12-01`) of a moment in milliseconds since the epoch."""
    return datetime.datetime.fromtimestamp(at_ms / 1000, zone).date().isoformat()


class Tally:
    """The box's tokens per local day, for the newest `KEPT_DAYS` days given."""

    def __init__(self, zone: datetime.tzinfo) -> None:
        self.zone = zone
        self._days: dict[str, int] = {}

    def __repr__(self) -> str:
        newest = max(self._days, default=None)
        shown = f"{self._days[newest]} tokens on {newest}" if newest else "nothing counted"
        return f"Tally({shown}, {self.zone})"

    def add(self, at_ms: int, tokens: int) -> None:
        day = day_of(at_ms, self.zone)
        self._days[day] = self._days.get(day, 0) + tokens
        if len(self._days) > KEPT_DAYS:  # ISO dates sort as the days do
            del self._days[min(self._days)]

    def on(self, day: str) -> int:
        return self._days.get(day, 0)

    def today(self, now_ms: int) -> tuple[str, int]:
        """Today's day and its tokens so far."""
        day = day_of(now_ms, self.zone)
        return day, self.on(day)


def turn_over(spent: int, max_tokens: int | None) -> str | None:
    """The owner's line when a turn has spent more than its budget; None while within it."""
    if max_tokens is None or spent <= max_tokens:
        return None
    return (
        f"this turn used {spent} tokens, more than its budget of {max_tokens}, "
        "so it stops here and its last answer's tool calls were not run"
    )


def day_reached(spent: int, cap: int, day: str, *, running: bool) -> str | None:
    """The owner's line when the day's tokens have reached `cap` (0: no cap); None before.
    `running`: said of the turn that reached it (it stops), else of a turn that never starts."""
    if not cap or spent < cap:
        return None
    said = f"the box has used {spent} tokens today ({day}), [loop] max_tokens_per_day is {cap}"
    if running:
        return f"{said}, so this turn stops here and its last answer's tool calls were not run"
    return f"{said}, so no turn runs until midnight; raise the key in config.toml to go on"


class Meter:
    """What a turn asks of the box's accounting: an answer's cost stamped with its time and
    counted in the day's `tally`, and whether a turn may start or must stop. `cap` is
    `[loop] max_tokens_per_day` (0: none); `now` the wall clock in milliseconds."""

    def __init__(self, tally: Tally, cap: int = 0, now: Callable[[], int] = now_ms) -> None:
        self.tally = tally
        self.cap = cap
        self._now = now

    def __repr__(self) -> str:
        return f"Meter({self.tally!r}, cap {self.cap or 'none'})"

    def spend(self, usage: Usage | None) -> Spent | None:
        """The record of what an answer cost, counted today; None when its server said not."""
        if usage is None:
            return None
        now = self._now()
        self.tally.add(now, usage.total)
        return Spent(usage.input, usage.output, rfc3339(now))

    def today(self) -> tuple[str, int]:
        return self.tally.today(self._now())

    def refusal(self) -> str | None:
        """Why no turn may start now (the day's cap is reached), or None."""
        day, spent = self.today()
        return day_reached(spent, self.cap, day, running=False)

    def stop(self, turn_tokens: int, max_tokens: int | None) -> str | None:
        """Why a turn that has spent `turn_tokens` must stop after its answer, or None."""
        day, spent = self.today()
        return turn_over(turn_tokens, max_tokens) or day_reached(spent, self.cap, day, running=True)
