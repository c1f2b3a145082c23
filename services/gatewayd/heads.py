"""The witness (SPEC §7): the newest ledger head gatewayd has seen on `broker-events`, kept at
`{home}/witness/gatewayd.json`, out of brokerd's reach, for `bxctl audit verify`.

It never goes back, and is never overwritten by a regrown chain (issue 10): a head older than
the one kept (or the same seq with another hash) is refused, and so is any newer head while
the ledger no longer holds the kept record, a line ending at its `size` with its hash (read
back from there: O(1)). After one refusal, logged once as SUSPICIOUS, every head is refused
and the file is left as it is, until the owner resets it (a change gatewayd did not make).
A ledger gatewayd may not read (another user's) leaves the seq rule alone, said once. Writes
are atomic (temp, fsync, rename) and coalesced: a burst of heads costs one write.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import anyio

from bxcore.home import disk, witness
from bxcore.wire.messages import LedgerHead

log = logging.getLogger("gatewayd")

_Stamp = tuple[int, int, int] | None  # the witness file's (inode, mtime, size): who changed it


def _stamp(path: Path) -> _Stamp:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _adds_nothing(kept: witness.Seen | None, seen: witness.Seen) -> bool:
    """`seen` is the kept head again (its size is taken only when the kept one lacks it)."""
    return (
        kept is not None
        and (kept.seq, kept.hash) == (seen.seq, seen.hash)
        and (kept.size is not None or seen.size is None)
    )


class HeadKeeper:
    """`saw` takes heads on the event loop; `flush` (in a worker thread) checks the ledger and
    writes. `refusing` says why no head is kept any more; `blind`, that the ledger cannot be
    read here."""

    def __init__(self, path: Path, ledger: Path) -> None:
        self.path = path
        self.ledger = ledger
        self.refused = 0
        self.refusing: str | None = None
        self.blind = False
        self.written: witness.Seen | None = None  # what the file holds, as far as we know
        self.newest: witness.Seen | None = None  # the newest head taken, to be written
        self._stamp: _Stamp = None
        self._lock = threading.Lock()
        self._read_problem: str | None = None  # said once, until the ledger reads again
        self._writing = False
        self._wake = anyio.Event()
        self._load()

    def __repr__(self) -> str:
        seq = "none" if self.newest is None else self.newest.seq
        state = f", refusing: {self.refusing}" if self.refusing else ""
        blind = ", ledger unreadable: seq rule only" if self.blind else ""
        return f"HeadKeeper({self.path}, newest seq {seq}, {self.refused} refused{state}{blind})"

    def _load(self) -> None:
        """(Re)reads the file; a damaged or unreadable one is kept as it is and stops the
        witness until the owner changes it."""
        self._stamp = _stamp(self.path)
        try:
            self.written = witness.read(self.path)
        except witness.WitnessUnreadable as error:
            self.written, self.newest = None, None
            self.refusing = str(error)
            log.error("%s: keeping it as it is, and no head, until the owner resets it", error)
            return
        self.newest, self.refusing = self.written, None

    def _reset_by_owner(self) -> bool:
        """Whether the file changed since gatewayd last read or wrote it (the owner reset
        it on purpose): if so it is read again, and followed from there."""
        if self._writing or _stamp(self.path) == self._stamp:
            return False
        self._load()
        if self.refusing is None:
            kept = "none" if self.written is None else str(self.written)
            log.warning("the witness %s was changed outside gatewayd; following it: %s",
                        self.path, kept)  # fmt: skip
        return True

    def saw(self, head: LedgerHead) -> bool:
        """Take a head brokerd published; False when it is refused."""
        seen = witness.Seen(head.seq, head.hash, head.size)
        with self._lock:
            why = self._refusal(seen)
            if why is not None and self._reset_by_owner():
                why = self._refusal(seen)
            if why is not None:
                self._refuse(why)
                return False
            if _adds_nothing(self.newest, seen):
                return True
            self.newest = seen
        self._wake.set()
        return True

    def _refusal(self, seen: witness.Seen) -> str | None:
        if self.refusing is not None:
            return self.refusing
        newest = self.newest
        if newest is None or seen.seq > newest.seq:
            return None
        if seen.seq == newest.seq and seen.hash == newest.hash:
            return None
        return (
            f"brokerd published ledger head seq {seen.seq} ({seen.hash[:12]}…), but seq "
            f"{newest.seq} ({newest.hash[:12]}…) was already seen: the ledger may have been cut "
            "or rewritten"
        )

    def _refuse(self, why: str) -> None:
        self.refused += 1
        if self.refusing is not None:
            return  # said once
        self.refusing = why
        kept = "nothing" if self.written is None else f"seq {self.written.seq}"
        log.error(
            "SUSPICIOUS: %s; the witness keeps %s and takes no newer head until the owner "
            "resets it; run `bxctl audit verify`",
            why,
            kept,
        )

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
        """Write the newest head, once the ledger is found to still hold the kept one."""
        with self._lock:
            self._reset_by_owner()
            newest, written = self.newest, self.written
            if self.refusing is not None or newest is None or newest == written:
                return
        try:
            lost = self._lost(written)
        except _Later:
            return
        with self._lock:
            if lost is not None:
                if not self._reset_by_owner():
                    self._refuse(lost)
                return
            self._writing = True  # the file changes under our hand: not the owner's reset
        try:
            kept = witness.keep(self.path, newest)
        except witness.WitnessUnreadable as error:
            with self._lock:
                self._writing = False
                self._refuse(str(error))
            return
        except OSError as error:
            with self._lock:
                self._writing = False
            why = disk.unwritable(self.path.parent, error)  # written with the next head
            log.error("cannot write the witness %s: %s; written again with the next head",
                      self.path, why)  # fmt: skip
            return
        with self._lock:
            self._writing = False
            self._stamp = _stamp(self.path)
            if kept:
                self.written = newest
            else:  # someone put a newer head in our file: keep theirs, and say so
                log.error("the witness %s holds a newer head than seq %d; kept", self.path,
                          newest.seq)  # fmt: skip

    def _lost(self, kept: witness.Seen | None) -> str | None:
        """Why the ledger no longer holds `kept`; None when it does or cannot be told (no
        size, or a ledger gatewayd may not read). Raises `_Later` when reading failed for
        now (said once): the head waits for the next one."""
        if kept is None or kept.size is None or self.blind:
            return None
        try:
            held = witness.holds(self.ledger, kept)
        except PermissionError as error:
            self.blind = True
            log.warning(
                "cannot read the ledger %s (%s): the witness can only refuse heads that go "
                "back, not a chain cut and grown again",
                self.ledger,
                error.strerror,
            )
            return None
        except OSError as error:
            problem = f"{error.strerror or error}"
            if problem != self._read_problem:
                log.error("cannot read the ledger %s to check the witness: %s; the witness "
                          "waits", self.ledger, problem)  # fmt: skip
            self._read_problem = problem
            raise _Later from error
        self._read_problem = None
        if held:
            return None
        return (
            f"the ledger {self.ledger} no longer holds the record the witness kept ({kept}): "
            "it was cut or rewritten"
        )


class _Later(Exception):
    """The ledger could not be read just now: try again at the next head."""
