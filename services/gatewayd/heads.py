"""The witness (SPEC §7): the newest ledger head gatewayd has seen on `broker-events`, kept at
`{home}/witness/gatewayd.json`, out of brokerd's reach, for `bxctl audit verify`.

It never goes back: a head older than one already seen (or the same seq with another hash)
is what a rewritten ledger looks like, so it is logged loudly and the kept head stays. Writes
are atomic (temp, fsync, rename) and coalesced: a burst of heads costs one write.
"""

from __future__ import annotations

import logging
from pathlib import Path

import anyio

from bxcore import witness
from bxcore.messages import LedgerHead

log = logging.getLogger("gatewayd")


class HeadKeeper:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.written = witness.read(path)
        self.newest = self.written
        self.refused = 0
        self._wake = anyio.Event()

    def __repr__(self) -> str:
        seq = "none" if self.newest is None else self.newest.seq
        return f"HeadKeeper({self.path}, newest seq {seq}, {self.refused} refused)"

    def saw(self, head: LedgerHead) -> bool:
        """Take a head brokerd published; False (and a loud log) when it would go back."""
        seen = witness.Seen(head.seq, head.hash)
        newest = self.newest
        if newest is not None:
            if seen == newest:
                return True
            if seen.seq < newest.seq or (seen.seq == newest.seq and seen.hash != newest.hash):
                self.refused += 1
                log.error(
                    "SUSPICIOUS: brokerd published ledger head seq %d (%s…), but seq %d (%s…) "
                    "was already seen: the ledger may have been cut or rewritten; keeping seq %d; "
                    "run `bxctl audit verify`",
                    seen.seq,
                    seen.hash[:12],
                    newest.seq,
                    newest.hash[:12],
                    newest.seq,
                )
                return False
        self.newest = seen
        self._wake.set()
        return True

    async def run(self) -> None:
        """Write the newest head whenever it changes, until cancelled; then once more."""
        try:
            while True:
                await self._wake.wait()
                self._wake = anyio.Event()
                await anyio.to_thread.run_sync(self.flush)
        finally:
            with anyio.CancelScope(shield=True):
                self.flush()

    def flush(self) -> None:
        newest = self.newest
        if newest is None or newest == self.written:
            return
        try:
            kept = witness.keep(self.path, newest)
        except OSError as error:
            log.error("cannot write the witness %s: %s", self.path, error)
            return
        if kept:
            self.written = newest
        else:  # someone put a newer head in our file: keep theirs, and say so
            log.error("the witness %s holds a newer head than seq %d; kept", self.path, newest.seq)
