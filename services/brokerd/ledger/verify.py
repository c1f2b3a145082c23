"""The whole ledger checked fast, for `bxctl audit verify` (SPEC §7, issue 10): a million
records in seconds, with the very reports of the full walk (`scan.scan`).

Reads only. The file is read in large blocks, and each line's link is checked from its
canonical prefix alone, as bytes: `{"seq":N,"at":"<24>","prev":"<64 hex>","kind":"`, N the
next seq and the hex the previous line's SHA-256; then one SHA-256 of the line. No JSON. Every
record brokerd writes has exactly that prefix (records.build_record), so a line whose prefix
differs fails the full check too. The full walk takes over from the line before the first
such line (or the witnessed line that does not match), and always for the last two lines, so
which line is named, the words, and torn against tampered are the full walk's.

What the fast walk does not do is parse the lines in between: a line that is no canonical
record but whose successor carries its hash can only be written by whoever rewrote every
line after it, which only the witness catches, in either walk.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

from services.brokerd.core.chain import ChainReport
from services.brokerd.core.records import MAX_LINE_BYTES, Head
from services.brokerd.ledger.index import START, Mark
from services.brokerd.ledger.scan import mismatch, scan

#: Read this much at a time: large enough that the per-block costs vanish, small enough to
#: keep memory flat (measured at 1M records: 256 KiB to 16 MiB all within the noise, ~3 s).
BLOCK = 1024 * 1024

#: (records checked, bytes checked, bytes to check), from where the walk began; called before
#: the first block, after each, and once at the end.
Progress = Callable[[int, int, int], None]


class LedgerUnreadable(Exception):
    """The ledger cannot be read: one line naming the file and why."""


@dataclass(frozen=True, slots=True)
class Verified:
    """What `verify_file` found. `report` is the full walk's report on the same file."""

    report: ChainReport
    size: int  # the file's length through the last good record
    start: Mark  # where the walk began: START, or the record `since` named
    since_problem: str | None = None  # why `since` could not be used (everything was checked)


def verify_file(
    path: str | os.PathLike[str],
    *,
    witness: Head | None = None,
    since: Mark | None = None,
    progress: Progress | None = None,
) -> Verified:
    """Checks the chain without writing, against `witness` (the newest head the owner saw).
    With `since` (a record a verify checked before, and where its line ends), only what
    follows it is walked, once the file is found to still hold it there; when it does not,
    `since_problem` says why and the whole file is walked. Raises `LedgerUnreadable`."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            start, since_problem = START, None
            if since is not None:
                since_problem = mismatch(f, size, since, "the head the last verify checked")
                start = START if since_problem is not None else since
            handover = walk_fast(f, start, size, witness, progress)
            found = scan(f, start=handover, witness=witness)
    except OSError as e:
        raise LedgerUnreadable(f"cannot read the ledger {path}: {_cause(e)}") from e
    if progress is not None:
        total = size - start.size
        progress(found.report.head.seq - start.head.seq, total, total)
    return Verified(found.report, found.good_bytes, start, since_problem)


def verify(path: str | os.PathLike[str], *, witness: Head | None = None) -> ChainReport:
    """The whole file checked: `str(report)` is `ok: N records` or the first bad line.
    Raises `LedgerUnreadable`."""
    return verify_file(path, witness=witness).report


def walk_fast(
    f: BinaryIO,
    start: Mark,
    size: int,
    witness: Head | None,
    progress: Progress | None,
    on_line: Callable[[bytes, int], None] | None = None,
) -> Mark:
    """Walks the lines after `start` while each links by its prefix; returns where the full
    walk takes over: the record before the last line walked (`start` when none was).
    `on_line(line, offset)` sees each line before that, so the full walk sees the rest."""
    sha256 = hashlib.sha256
    seq, digest, pos = start.head.seq, start.head.hash, start.size  # the record before `pos`
    back_seq, back_digest, back_pos = seq, digest, pos  # the same, one line earlier
    walked: bytes | None = None  # the last line walked, at back_pos: not yet given to on_line
    expect = b'","prev":"%s","kind":"' % digest.encode()
    witnessed = witness.seq if witness is not None else -1
    total = size - start.size
    f.seek(pos)
    read_to, rest = pos, b""
    if progress is not None:
        progress(0, 0, total)
    while read_to < size:
        block = f.read(min(BLOCK, size - read_to))
        if not block:  # the file shrank meanwhile: the full walk says what is there
            break
        read_to += len(block)
        lines = (rest + block).split(b"\n") if rest else block.split(b"\n")
        rest = lines.pop()
        for line in lines:
            prefix = b'{"seq":%d,"at":"' % (seq + 1)
            at_end = len(prefix) + 24
            if not line.startswith(prefix) or line[at_end : at_end + 84] != expect:
                return Mark(Head(back_seq, back_digest), back_pos)
            this = sha256(line).hexdigest()
            if seq + 1 == witnessed and witness is not None and this != witness.hash:
                return Mark(Head(back_seq, back_digest), back_pos)
            if on_line is not None:
                if walked is not None:
                    on_line(walked, back_pos)
                walked = line
            back_seq, back_digest, back_pos = seq, digest, pos
            seq, digest, pos = seq + 1, this, pos + len(line) + 1
            expect = b'","prev":"%s","kind":"' % this.encode()
        if len(rest) > MAX_LINE_BYTES:  # never hold more of one line: the full walk skips it
            break
        if progress is not None:
            progress(seq - start.head.seq, pos - start.size, total)
    return Mark(Head(back_seq, back_digest), back_pos)


def held(path: str | os.PathLike[str], mark: Mark, name: str) -> str | None:
    """Why the ledger does not hold `mark`'s record, a line ending at `mark.size` with its
    hash, in one line naming it as `name`; None when it does. O(1): reads back from there.
    Raises `LedgerUnreadable`."""
    try:
        with open(path, "rb") as f:
            return mismatch(f, os.fstat(f.fileno()).st_size, mark, name)
    except OSError as e:
        raise LedgerUnreadable(f"cannot read the ledger {path}: {_cause(e)}") from e


def _cause(e: OSError) -> str:
    return e.strerror or str(e) or type(e).__name__
