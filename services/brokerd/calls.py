"""The call book (I8): what brokerd knows of each call, named by (session, call). Calls in
flight (a repeat waits for the one answer being made), the answers given lately (within a
count and a byte budget), and the ledger for the rest (`lookup`; `call.replay` turns its
records into the recorded answer). Shared by the broker socket, the desk and the driver.
"""

from __future__ import annotations

from collections import OrderedDict

import anyio

from bxcore.messages import Done, Outcome, Pending
from services.brokerd.core.records import CallRecords
from services.brokerd.ledger import Ledger

Key = tuple[str, str]

MAX_KEPT_BYTES = 64 * 1024 * 1024


class Answer:
    """An answer being made; every asker waits for the one answer. The event is made only
    when a repeat comes to wait: most calls are asked once."""

    __slots__ = ("_done", "outcome")

    def __init__(self) -> None:
        self._done: anyio.Event | None = None
        self.outcome: Outcome | None = None

    def give(self, outcome: Outcome) -> None:
        self.outcome = outcome
        if self._done is not None:
            self._done.set()

    async def wait(self) -> Outcome:
        if self.outcome is None:
            if self._done is None:
                self._done = anyio.Event()
            await self._done.wait()
        assert self.outcome is not None
        return self.outcome


class CallBook:
    def __init__(self, ledger: Ledger, kept: int) -> None:
        self.ledger = ledger
        self._kept = kept
        self._making: dict[Key, Answer] = {}
        self._answers: OrderedDict[Key, Outcome] = OrderedDict()
        self._bytes = 0

    def __repr__(self) -> str:
        return f"CallBook({len(self._making)} in flight, {len(self._answers)} answers kept)"

    def making(self, key: Key) -> Answer | None:
        return self._making.get(key)

    def start(self, key: Key) -> Answer:
        answer = Answer()
        self._making[key] = answer
        return answer

    def finish(self, key: Key, outcome: Outcome) -> None:
        """The call's answer is made: keep it (unless it only says pending) and wake waiters."""
        answer = self._making.pop(key, None)
        if not isinstance(outcome, Pending):
            self._keep(key, outcome)
        if answer is not None:
            answer.give(outcome)

    def kept(self, key: Key) -> Outcome | None:
        return self._answers.get(key)

    def lookup(self, key: Key) -> CallRecords | None:
        """The ledger's records of the call; `LedgerUnavailable` when it cannot say."""
        return self.ledger.lookup(*key)

    def _keep(self, key: Key, outcome: Outcome) -> None:
        size = len(outcome.output) if isinstance(outcome, Done) else 0
        old = self._answers.pop(key, None)
        if isinstance(old, Done):
            self._bytes -= len(old.output)
        self._answers[key] = outcome
        self._bytes += size
        while len(self._answers) > self._kept or self._bytes > MAX_KEPT_BYTES:
            _, dropped = self._answers.popitem(last=False)
            if isinstance(dropped, Done):
                self._bytes -= len(dropped.output)
