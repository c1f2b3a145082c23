"""A session's history that also remembers every record it took (`Recorded.taken`), for the
tests that compare what loopd wrote with its file: `SessionLog` itself keeps only what the
model is still sent (issue 28)."""

from __future__ import annotations

from dataclasses import dataclass, field

from bxcore.wire.messages import TurnEvent
from services.loopd.history import SessionLog
from services.loopd.history_records import Record


@dataclass
class Recorded(SessionLog):
    taken: list[Record] = field(default_factory=list)

    def _take(self, record: Record) -> None:
        self.taken.append(record)
        super()._take(record)

    def events(self, after: int = 0) -> list[TurnEvent]:
        """The events taken with a seq past `after`."""
        return [r for r in self.taken if isinstance(r, TurnEvent) and r.seq > after]
