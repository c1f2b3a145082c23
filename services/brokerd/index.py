"""The ledger's index of calls (SPEC §7, I8): (session, call) to that call's records, and
approval id to its call. Built from the file at start and kept by every append; it holds
parsed records and does no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from services.brokerd.records import Record

INDEXED = frozenset({"decision", "verdict", "executed"})


@dataclass(frozen=True, slots=True)
class CallRecords:
    """One call's records (I8), as parsed dicts: its decision, verdict and execution."""

    decision: Record
    verdict: Record | None = None
    executed: Record | None = None


class Index:
    """(session, call) → that call's records; approval id → (session, call). The first record
    of each sort wins (a call is decided, settled and run once). Only a `pending` decision
    names an approval; a verdict reaches its call through it; a record with no call is
    skipped."""

    def __init__(self) -> None:
        self.calls: dict[tuple[str, str], CallRecords] = {}
        self.approvals: dict[str, tuple[str, str]] = {}

    def add(self, record: Record) -> None:
        kind = record["kind"]
        if kind == "decision":
            key = (str(record["session"]), str(record["call"]))
            if key in self.calls:
                return
            self.calls[key] = CallRecords(record)
            approval = record.get("approval")
            if record["outcome"] == "pending" and isinstance(approval, str):
                self.approvals.setdefault(approval, key)
        elif kind == "verdict":
            found = self.approvals.get(str(record["approval"]))
            if found is not None and self.calls[found].verdict is None:
                self.calls[found] = replace(self.calls[found], verdict=record)
        elif kind == "executed":
            key = (str(record["session"]), str(record["call"]))
            held = self.calls.get(key)
            if held is not None and held.executed is None:
                self.calls[key] = replace(held, executed=record)

    def session_of(self, record: Record) -> tuple[str, ...]:
        """The sessions a record belongs to (for `tail --session`)."""
        kind = record.get("kind")
        if kind == "absorbed":
            return (str(record.get("parent")), str(record.get("child")))
        if kind == "verdict":
            found = self.approvals.get(str(record.get("approval")))
            return () if found is None else (found[0],)
        return (str(record["session"]),) if "session" in record else ()
