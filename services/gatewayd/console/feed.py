"""The console's live stream (SPEC §12.3): what gatewayd hears on `loop-events` and
`broker-events`, numbered and kept a while, so a page that reconnects with `Last-Event-ID`
gets what it missed, or `reset` when that is gone (or gatewayd restarted meanwhile).

An event's id is `<boot>-<n>`: `boot` is new at each start of gatewayd, `n` counts from 1. Every
open page waits on the same `anyio.Event`; nothing is queued per page, so fifty pages cost
fifty waiting generators and no copies of the events. What is kept is counted as the memory it
takes (`held`), at most `KEEP_BYTES`.
"""

from __future__ import annotations

import itertools
import secrets
from collections import deque
from dataclasses import dataclass

import anyio

from bxcore.wire import codec as wire
from bxcore.wire.messages import ApprovalRequested, ApprovalSettled, LedgerHead, TurnEvent
from services.gatewayd.held import held

KEEP_EVENTS = 4096
KEEP_BYTES = 8 * 1024 * 1024
SLOT = 8  # an item's place in the deque, beside the item itself (`held`)
#: The names pages listen for, by the message that makes them.
NAMES: dict[type, str] = {
    TurnEvent: "turn",
    ApprovalRequested: "approval_requested",
    ApprovalSettled: "approval_settled",
    LedgerHead: "ledger",
}


@dataclass(frozen=True, slots=True)
class Item:
    n: int
    name: str
    data: bytes  # the message as the wire writes it: one line of JSON


class Feed:
    def __init__(self, keep: int = KEEP_EVENTS, keep_bytes: int = KEEP_BYTES) -> None:
        self.boot = secrets.token_hex(4)
        self.last = 0
        self._items: deque[Item] = deque()
        self._bytes = 0
        self._keep = keep
        self._keep_bytes = keep_bytes
        self._changed = anyio.Event()

    def __repr__(self) -> str:
        return f"Feed({self.boot}, {len(self._items)} kept, last {self.last})"

    def event_id(self, n: int) -> str:
        return f"{self.boot}-{n}"

    def take(self, message: object) -> None:
        """A message from a stream: kept and announced when pages care for its kind."""
        name = NAMES.get(type(message))
        if name is not None:
            self.publish(name, wire.encode(message))

    def publish(self, name: str, data: bytes) -> None:
        self.last += 1
        item = Item(self.last, name, data)
        self._items.append(item)
        self._bytes += held(item) + SLOT
        while len(self._items) > self._keep or (
            self._bytes > self._keep_bytes and len(self._items) > 1
        ):
            self._bytes -= held(self._items.popleft()) + SLOT
        self._changed.set()
        self._changed = anyio.Event()

    def resume_from(self, last_event_id: str | None) -> int | None:
        """Where a page resumes: the `n` after which it needs events, or None when it must
        `reset` (another boot's id, a malformed one, or events it missed are gone)."""
        if last_event_id is None:
            return self.last
        boot, _, number = last_event_id.partition("-")
        if boot != self.boot or not (number.isascii() and number.isdigit()) or len(number) > 18:
            return None
        n = int(number)
        oldest = self._items[0].n if self._items else self.last + 1
        if n > self.last or n < oldest - 1:
            return None
        return n

    def after(self, n: int) -> list[Item]:
        """The kept events after `n`, oldest first."""
        if n >= self.last:
            return []
        start = max(0, len(self._items) - (self.last - n))
        return list(itertools.islice(self._items, start, None))

    async def wait(self, n: int, timeout: float) -> None:
        """Until there is an event after `n`, or `timeout` seconds pass."""
        if n < self.last:
            return
        changed = self._changed
        with anyio.move_on_after(timeout):
            await changed.wait()
