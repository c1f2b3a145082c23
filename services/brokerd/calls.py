"""The call book (I8): what brokerd knows of each call, named by (session, call). Calls in
flight (a repeat waits for the one answer being made), the answers given lately (within a
count and a byte budget), and the ledger for the rest (`lookup`; `replay` turns its
records into the recorded answer). Shared by the broker socket, the desk and the driver.

The first two are bxcore's one way of answering a request once (`bxcore.once`); a `pending`
answer is never kept, since the call goes on after it.
"""

from __future__ import annotations

from bxcore.bounded import Bounded
from bxcore.ids import descends
from bxcore.once import Once
from bxcore.wire.messages import Done, Outcome, Pending
from services.brokerd.core.records import CallRecords
from services.brokerd.core.targets import Seen
from services.brokerd.ledger.file import Ledger, LedgerUnavailable

Key = tuple[str, str]

MAX_KEPT_BYTES = 64 * 1024 * 1024


def _size(outcome: Outcome) -> int:
    return len(outcome.output) if isinstance(outcome, Done) else 0


def _final(outcome: Outcome) -> bool:
    return not isinstance(outcome, Pending)


class CallBook(Once[Key, Outcome]):
    def __init__(self, ledger: Ledger, kept: int) -> None:
        self._answers: Bounded[Key, Outcome] = Bounded(kept, weigh=_size, budget=MAX_KEPT_BYTES)
        super().__init__(self._answers, keep=_final)
        self.ledger = ledger

    def __repr__(self) -> str:
        return f"CallBook({super().__repr__()})"

    def lookup(self, key: Key) -> CallRecords | None:
        """The ledger's records of the call; `LedgerUnavailable` when it cannot say."""
        return self.ledger.lookup(*key)

    def first_seen(self, session: str, text: str) -> Seen | None:
        """The first call of `session` (or of one of its sub-agents) whose untrusted result,
        still kept, holds `text` (§20: where a value the owner did not give came from), with
        its tool as the ledger recorded it; None when no kept result does; looked for whatever
        its case."""
        folded = text.lower()
        for (owner, call), outcome in self._answers.items():
            if (
                isinstance(outcome, Done)
                and outcome.label.untrusted
                and descends(owner, session)
                and (text in outcome.output or folded in outcome.output.lower())
            ):
                return Seen(owner, call, self.tool_of((owner, call)))
        return None

    def tool_of(self, key: Key) -> str | None:
        """The tool of a call the ledger recorded; None when it cannot say."""
        try:
            found = self.lookup(key)
        except LedgerUnavailable:
            return None
        tool = None if found is None else found.decision.get("tool")
        return tool if isinstance(tool, str) else None
