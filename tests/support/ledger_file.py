"""A ledger file grown record by record with brokerd's own record builder, cut and grown
again, as a test needs it: for the witness (gatewayd's and `bxctl audit verify`'s); and a whole
chain's lines checked at once."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from bxcore.wire.messages import LedgerHead
from services.brokerd.core.chain import ChainCheck, ChainReport
from services.brokerd.core.records import GENESIS, Head, build


class GrowingLedger:
    """The file at `path`, rewritten whole at each change (tests keep it small)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: list[bytes] = []
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")

    def grow(self, n: int, version: str = "t") -> LedgerHead:
        """`n` more `started` records (their `version` tells one chain from another); the
        head brokerd would publish after them."""
        for _ in range(n):
            prev = hashlib.sha256(self.lines[-1]).hexdigest() if self.lines else GENESIS
            seq = len(self.lines) + 1
            fields = {"pid": seq, "version": version}
            self.lines.append(build(seq, "2026-11-30T02:34:30.123Z", prev, "started", fields))
        self.path.write_bytes(b"".join(line + b"\n" for line in self.lines))
        return self.head()

    def cut(self, seq: int) -> None:
        """Keep the records up to `seq` only."""
        del self.lines[seq:]
        self.path.write_bytes(b"".join(line + b"\n" for line in self.lines))

    def head(self) -> LedgerHead:
        size = sum(len(line) + 1 for line in self.lines)
        last = hashlib.sha256(self.lines[-1]).hexdigest() if self.lines else GENESIS
        return LedgerHead(len(self.lines), last, size)


def check_chain(lines: Iterable[bytes], *, witness: Head | None = None) -> ChainReport:
    """The report of a whole chain's lines, checked as `bxctl audit verify` checks them."""
    check = ChainCheck(witness)
    for line in lines:
        if check.feed(line) is None:
            break
    return check.report()
