"""The hash chain of the ledger (SPEC §7): lines checked one by one, each a canonical record
whose `seq` follows and whose `prev` is the hash of the line before; and, given the head the
owner saw (the witness), that the chain reaches it unchanged. Pure: no I/O.
"""

from __future__ import annotations

from bxcore.frozen import frozen
from services.brokerd.core.records import GENESIS, Head, Record, line_hash, parse_line


@frozen
class ChainReport:
    """What a walk over the ledger found. `str()` is what `bxctl audit verify` prints."""

    records: int  # good records before the first problem (all of them when ok)
    head: Head  # the last good record
    bad_line: int | None = None  # 1-based
    why: str | None = None  # one line, naming the line: "line 17: prev does not match ..."
    torn: bool = False  # the only problem is a last line that never ended (open cuts it)

    @property
    def ok(self) -> bool:
        return self.why is None

    def __str__(self) -> str:
        return f"ok: {self.records} records" if self.why is None else self.why


class ChainCheck:
    """Walks a chain one line at a time; stops taking lines at the first problem. Each line
    (without newline) must be a canonical record, seq must run 1, 2, 3..., and prev must be the
    previous line's hash: a change to line k is found at line k (the line is no record) or at
    line k+1 (prev); a change to the last line only against a `witness` head.

    `witness` is a head seen earlier (by the owner, or by the ledger before a failure): the
    chain must hold a record at its seq with its hash, else it has been cut or rewritten.
    """

    def __init__(
        self,
        witness: Head | None = None,
        witness_name: str = "the head seen",
        start: Head | None = None,
    ) -> None:
        self.head = start or Head(0, GENESIS)  # the record before the first line fed
        self.bad_line: int | None = None
        self.why: str | None = None
        self.shape_problem = False  # the bad line is not a record at all (vs. a chain break)
        self._witness = witness
        self._witness_name = witness_name

    def feed(self, line: bytes) -> Record | None:
        """The next line (without its newline): its record, or None when it is bad (or a
        problem was already found)."""
        if self.why is not None:
            return None
        number = self.head.seq + 1
        record = parse_line(line)
        if isinstance(record, str):
            self._fail(number, record, shape=True)
            return None
        if record["seq"] != number:
            self._fail(number, f"seq is {record['seq']}, expected {number}")
            return None
        if record["prev"] != self.head.hash:
            after = f"the hash of line {number - 1}" if number > 1 else "64 zeros (genesis)"
            self._fail(number, f"prev does not match {after}")
            return None
        head = Head(number, line_hash(line))
        w = self._witness
        if w is not None and w.seq == number and w.hash != head.hash:
            self._fail(number, f"does not match {self._witness_name} (seq {w.seq}): tampered")
            return None
        self.head = head
        return record

    def _fail(self, number: int, why: str, *, shape: bool = False) -> None:
        self.bad_line, self.why, self.shape_problem = number, f"line {number}: {why}", shape

    def short_of_witness(self) -> str | None:
        """One line when the good records so far end before the witness's seq, else None."""
        w = self._witness
        if w is None or self.head.seq >= w.seq:
            return None
        return (
            f"the ledger ends at seq {self.head.seq}, before {self._witness_name} "
            f"(seq {w.seq}): cut or rewritten"
        )

    def report(self) -> ChainReport:
        """The result so far; with a witness, also whether the chain reached it."""
        short = self.short_of_witness()
        if self.why is None and short is not None:
            return ChainReport(self.head.seq, self.head, None, short)
        return ChainReport(self.head.seq, self.head, self.bad_line, self.why)
