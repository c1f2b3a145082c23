"""Opening the ledger (SPEC §7, I8): its file (created, flocked) and its index, and what a
start decides from the files: `Loaded` or `Broken` (why, and the head the file fell short of).

Start does not grow with the ledger (issue 10): only the records after the index's mark are
read. A ledger that ends before the head brokerd confirmed (`head`) or the owner's side
saw (the witness), or no longer holds it, was cut or rolled back: `Broken`. Never writes or
cuts the ledger (`Ledger` applies what is decided), never trusts a head it cannot read.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bxcore.home import witness as witnesses
from services.brokerd.core.records import Head
from services.brokerd.ledger.index import START, Index, IndexError_, Mark
from services.brokerd.ledger.scan import Scan, mismatch, scan
from services.brokerd.ledger.verify import walk_fast

INDEX_FILE = "index.sqlite3"


@dataclass(frozen=True, slots=True)
class Broken:
    """Damaged, cut or rolled back: why, in one line, and the head the file fell short of
    (None when it holds nothing the owner could accept as it is)."""

    why: str
    short: Mark | None


@dataclass(frozen=True, slots=True)
class Loaded:
    """What the walk from `start` (what the index held, or the first line) found."""

    found: Scan
    start: Mark


def decide(
    path: Path,
    size: int,
    index: Index,
    confirmed: Mark | None,
    witness_paths: Sequence[Path],
    *,
    accept: bool,
) -> Broken | Loaded:
    """Checks the ledger (of `size` bytes) against the head brokerd `confirmed`, the head the
    index holds and the witness, in that order, and walks what the index does not hold into
    it (resetting it when it holds what the file no longer has). With `accept`, the owner
    took the ledger as it is: neither a stale index nor the witness is held against it.
    Raises OSError (a file that cannot be read)."""
    with open(path, "rb") as f:
        if confirmed is not None:
            why = mismatch(f, size, confirmed, "the head brokerd confirmed")
            if why is not None:
                return Broken(why, confirmed)
        start = index.covered
        stale = mismatch(f, size, start, "the head the index holds")
        if stale is not None and confirmed is None and not accept:
            # The index held calls this file no longer has: it was cut or replaced.
            return Broken(stale, start)
        if stale is not None:
            index.reset()  # derived from what is gone: read the whole ledger again
            start = START
        handover = walk_fast(f, start, size, None, None, on_line=index.add_line)
        found = scan(f, index.add, start=handover)
        try:
            seen = None if accept else newest_witness(witness_paths)
        except witnesses.WitnessUnreadable as e:
            return Broken(str(e), START)  # never "no witness": the owner decides
        report = found.report
        if report.ok or found.cut_why is not None:
            short = seen is not None and seen.head.seq > report.head.seq
            why = None
            if seen is not None and not short and seen.size:
                why = mismatch(f, size, seen, "the head the owner saw")
            if short and seen is not None:
                why = (
                    f"the ledger ends at seq {report.head.seq}, before the head the "
                    f"owner saw (seq {seen.head.seq}): cut or rewritten"
                )
            if why is not None:
                return Broken(why, seen)
    return Loaded(found, start)


def newest_witness(paths: Sequence[Path]) -> Mark | None:
    """The newest head the owner saw (size 0 when it came without one); raises
    `WitnessUnreadable`."""
    seen = witnesses.newest(list(paths))
    if seen is None:
        return None
    return Mark(Head(seen.seq, seen.hash), seen.size or 0)


def open_file(path: Path, fsync: Callable[[int], None]) -> int:
    """The ledger's file for appending (its folder and it created, and fsynced into their
    folders, when missing), locked (flock) for this process alone. Raises OSError."""
    folder = path.parent
    if not folder.is_dir():
        folder.mkdir(mode=0o700, parents=True)
        _fsync_folder(folder.parent, fsync)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
    existed = path.exists()
    fd = os.open(path, flags, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            raise OSError(e.errno, "another process holds the ledger open") from e
        if not existed:
            _fsync_folder(folder, fsync)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_index(ledger: Path) -> Index:
    """The index beside the ledger; a damaged one is removed and built again, and one that
    cannot be opened is kept in memory (a start then reads the whole ledger again)."""
    path = ledger.with_name(INDEX_FILE)
    try:
        return Index(path)
    except IndexError_:
        for stale in (path, *(path.with_name(f"{INDEX_FILE}-{end}") for end in ("wal", "shm"))):
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
        try:
            return Index(path)
        except IndexError_:
            return Index(None)  # kept in memory; a start reads the whole ledger again


def _fsync_folder(folder: Path, fsync: Callable[[int], None]) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fsync(fd)
    finally:
        os.close(fd)
