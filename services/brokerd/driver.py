"""The call machine's shell (`core.call`): carries out each step's effects in order and feeds
back what they produced, until a step asks for nothing more.

`Record` goes to the group commit, `Run` to the courier, `Raise` to the label files, and
`Answer` to the call book (whoever waits for the call gets it). The effects addressed to the
owner's side (`Ask`, `Settle`, `Refuse`) go to the caller's `tell`, with the call as it is
then; `seen` is told every state the call passes through.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from services.brokerd.calls import CallBook
from services.brokerd.core.call import Call, step
from services.brokerd.core.call_events import (
    Answer,
    Durable,
    Effect,
    Event,
    NotDurable,
    NotRaised,
    Raise,
    Raised,
    Ran,
    Record,
    Run,
)
from services.brokerd.courier import Courier
from services.brokerd.ledger.commit import Committer
from services.brokerd.ledger.file import LedgerUnavailable
from services.brokerd.state import StateError, StateStore

log = logging.getLogger(__name__)

Tell = Callable[[Call, Effect], None]

DURABLE, NOT_DURABLE = Durable(), NotDurable()  # events with no data: one of each


def _nobody(call: Call, effect: Effect) -> None:
    raise AssertionError(f"{effect!r} of {call.key} has no one to go to")


def _unseen(call: Call) -> None:
    return None


class Driver:
    def __init__(
        self, committer: Committer, courier: Courier, labels: StateStore, book: CallBook
    ) -> None:
        self.committer = committer
        self.courier = courier
        self.labels = labels
        self.book = book

    def __repr__(self) -> str:
        return f"Driver({self.committer!r}, {self.book!r})"

    async def drive(
        self,
        call: Call,
        event: Event,
        tell: Tell = _nobody,
        seen: Callable[[Call], None] = _unseen,
    ) -> Call:
        """Step `call` by `event` and by every event its effects produce; the call at rest."""
        call, effects = step(call, event)
        seen(call)
        if not effects:  # a call found never decided only moves on to be judged
            return call
        return await self.carry_out(call, effects, tell, seen)

    async def carry_out(
        self,
        call: Call,
        effects: list[Effect],
        tell: Tell = _nobody,
        seen: Callable[[Call], None] = _unseen,
    ) -> Call:
        """Carry out a step's `effects` (the step taken by the caller, at once), then go on
        as `drive` does."""
        while True:
            fed: Event | None = None
            for effect in effects:
                if isinstance(effect, Record):
                    try:
                        await self.committer.append(effect.entries)
                        fed = DURABLE
                    except LedgerUnavailable:
                        fed = NOT_DURABLE
                elif isinstance(effect, Run):
                    fed = await self._run(call, effect)
                elif isinstance(effect, Raise):
                    fed = self._raise(call, effect)
                elif isinstance(effect, Answer):
                    self.book.finish(call.key, effect.outcome)
                else:
                    tell(call, effect)
            if fed is None:
                return call
            call, effects = step(call, fed)
            seen(call)

    async def _run(self, call: Call, effect: Run) -> Ran:
        result = await self.courier.run(call.session, call.call, effect.allowed)
        return Ran(
            result.ok,
            result.output,
            result.exit,
            result.ms,
            result.started,
            result.label,
            result.error,
        )

    def _raise(self, call: Call, effect: Raise) -> Raised | NotRaised:
        try:
            before = self.labels.read(call.session)
            return Raised(before, self.labels.raise_(call.session, before, effect.label))
        except StateError as error:
            log.error("%s", error)
            return NotRaised(str(error))
