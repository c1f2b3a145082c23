"""Group commit (SPEC §7): records queued by concurrent calls share one write and one fsync.

A caller awaits `append` and is resumed only after the fsync that covers its records has
returned, so nothing is answered or run before its record is durable (I1). The write runs on
the event loop itself: while it blocks, new requests wait in their sockets, and the next
batch takes all of them. Any failure fails every call in the batch and, through the ledger,
every call after it (`audit_unavailable`) until the ledger is reopened and re-verified.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import anyio

from bxcore import aio
from services.brokerd.core.records import Entry, Head
from services.brokerd.ledger.file import Ledger, LedgerState, LedgerUnavailable

log = logging.getLogger(__name__)

REOPEN_EVERY_S = 5.0


class _Slot:
    """One caller's place in a batch: its records and, later, their heads or the failure."""

    __slots__ = ("done", "entries", "error", "heads")

    def __init__(self, entries: Sequence[Entry]) -> None:
        self.entries = entries
        self.done = False
        self.heads: list[Head] = []
        self.error: LedgerUnavailable | None = None


class Committer:
    """The leader of each batch is whichever caller resumes first: after one checkpoint, in
    which every other ready task queues its records too, it writes the whole queue with one
    write and one fsync. The others find their records already durable when they resume.

    `alone()` says that no other request is being handled at all: then no one could join the
    batch during the checkpoint, so a lone caller writes at once and saves a turn of the event
    loop (a request that arrives meanwhile is read only after the resumed leader has written,
    so the checkpoint would not have taken it in either)."""

    def __init__(
        self,
        ledger: Ledger,
        on_commit: Callable[[Head], None],
        clock: Callable[[], float] = anyio.current_time,
        alone: Callable[[], bool] = lambda: False,
    ) -> None:
        self.ledger = ledger
        self._on_commit = on_commit
        self._clock = clock
        self._alone = alone
        self._queue: list[_Slot] = []
        self._last_reopen = -REOPEN_EVERY_S
        self.batches = 0

    def __repr__(self) -> str:
        return f"Committer({self.ledger!r}, {len(self._queue)} queued, {self.batches} batches)"

    @property
    def available(self) -> bool:
        """Whether appends may be tried now (a failed ledger is reopened every few seconds)."""
        if self._writes():  # asked twice a call: the answer, at once
            return True
        self.retry()
        return self._writes()

    def retry(self) -> None:
        """Reopen a failed ledger, at most every `REOPEN_EVERY_S`: a call does it as it comes,
        and brokerd between calls, so that the ledger's state says it writes again as soon as
        it can (the disk has room again, issue 28)."""
        if self.ledger.state is not LedgerState.FAILED:
            return
        now = self._clock()
        if now - self._last_reopen >= REOPEN_EVERY_S:
            self._last_reopen = now
            self.ledger.reopen()
            if self._writes():
                log.warning("the ledger was reopened and verified; writing again")

    def _writes(self) -> bool:
        return self.ledger.state is LedgerState.OK

    async def append(self, entries: Sequence[Entry]) -> list[Head]:
        """Append `entries` and return their heads once they are durable."""
        if not self.available:
            raise LedgerUnavailable(self.ledger.problem or "the ledger cannot be written")
        slot = _Slot(entries)
        self._queue.append(slot)
        if not self._alone():
            await aio.yield_once()  # let every ready task queue its records
        if not slot.done:
            batch, self._queue = self._queue, []
            self._commit(batch)
        if slot.error is not None:
            raise slot.error
        return slot.heads

    def _commit(self, batch: list[_Slot]) -> None:
        entries = [entry for slot in batch for entry in slot.entries]
        try:
            heads = self.ledger.append_batch(entries)
        except ValueError as error:  # an entry no record can hold: nothing was written
            if len(batch) > 1:
                for slot in batch:  # so that only its own caller fails
                    self._commit([slot])
                return
            log.error("a record could not be built, so its call is refused: %s", error)
            batch[0].error = LedgerUnavailable(f"the record could not be built: {error}")
            batch[0].done = True
            return
        except LedgerUnavailable as error:
            log.error("the ledger cannot be written, so every call is denied: %s", error)
            for slot in batch:
                slot.error = error
                slot.done = True
            return
        self.batches += 1
        start = 0
        for slot in batch:
            slot.heads = heads[start : start + len(slot.entries)]
            start += len(slot.entries)
            slot.done = True
        self._on_commit(heads[-1])
