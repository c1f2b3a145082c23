"""Reading the ledger's file (SPEC §7): its lines from any point, a chain walk from a record it
trusts (`scan`: every line parsed; `verify` walks faster), one line found by where it ends, a
call's or a job's records read back where the index says (`read_call`, `read_named`), the last
records (`tail`); the ledger's one error, `LedgerUnavailable`, and the index's errors made into
it (`INDEX_ERRORS`).

Reads only; turns nothing into records but through `services.brokerd.core` (`chain`,
`records.parse_line`). Never holds more than MAX_LINE_BYTES + 1 bytes of one line.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from bxcore.home import disk
from bxcore.home.witness import line_ending_at
from services.brokerd.core.chain import ChainCheck, ChainReport
from services.brokerd.core.records import (
    MAX_LINE_BYTES,
    CallRecords,
    Head,
    Record,
    line_hash,
    parse_line,
)
from services.brokerd.ledger.index import START, Mark, Where

_BLOCK = 64 * 1024


class LedgerUnavailable(Exception):
    """The ledger cannot be written: every call is denied `audit_unavailable` (§7)."""


class _IndexErrors:
    """`with INDEX_ERRORS:` makes an sqlite error `LedgerUnavailable`. One object, where a
    `contextlib.contextmanager` would make a generator a use (1.4 against 0.5 µs; every
    request is looked up)."""

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if isinstance(e, sqlite3.Error):
            raise LedgerUnavailable(f"the ledger's index cannot be read: {e}") from e


INDEX_ERRORS = _IndexErrors()


@dataclass(frozen=True, slots=True)
class Scan:
    report: ChainReport
    good_bytes: int  # the offset just after the last good line
    cut_why: str | None  # set when everything after good_bytes may be cut (never answered)


def read_lines(f: BinaryIO, start: int = 0) -> Iterator[tuple[bytes, bool, int]]:
    """(line without newline, whether it ended with one, offset after it), from `start`. A
    line longer than MAX_LINE_BYTES is yielded cut (and is bad)."""
    f.seek(start)
    offset = start
    while chunk := f.readline(MAX_LINE_BYTES + 1):
        offset += len(chunk)
        if chunk.endswith(b"\n"):
            yield chunk[:-1], True, offset
            continue
        ended = False
        if len(chunk) > MAX_LINE_BYTES:  # skip the rest of an overlong line
            while rest := f.readline(_BLOCK):
                offset += len(rest)
                if rest.endswith(b"\n"):
                    ended = True
                    break
        yield chunk, ended, offset


def scan(
    f: BinaryIO,
    on_record: Callable[[Record, int], None] | None = None,
    *,
    start: Mark = START,
    confirmed: Mark | None = None,
    witness: Head | None = None,
) -> Scan:
    """Walks the file from `start` (a record trusted to be there, checked by the caller).
    `on_record(record, offset)` sees each good record with where its line starts. The last
    line may be cut when it never ended, or is no record at all; with `confirmed` (the head
    this process last fsynced), everything after it may be cut."""
    size = os.fstat(f.fileno()).st_size
    if confirmed is not None:
        check = ChainCheck(confirmed.head, "the head this ledger confirmed", start=start.head)
    else:
        check = ChainCheck(witness, start=start.head)
    good = start.size
    cut_why: str | None = None  # everything after `good` was never answered
    torn_why: str | None = None  # a line that never ended, where nothing may be cut
    for line, ended, end in read_lines(f, start.size):
        number = check.head.seq + 1
        if confirmed is not None and check.head.seq == confirmed.head.seq:
            cut_why = f"line {number}: written after the last confirmed record (seq {number - 1})"
            break
        if not ended:
            why = f"line {number}: the last line has no newline (a torn write)"
            if confirmed is None:
                cut_why = why
            else:
                torn_why = f"{why}, before the head this ledger confirmed"
            break
        record = check.feed(line)
        if record is None:
            if check.shape_problem and end == size and confirmed is None:
                cut_why = check.why
            break
        if on_record is not None:
            on_record(record, good)
        good = end
    report = check.report()
    short = check.short_of_witness()  # only with a witness (never with `confirmed`)
    if cut_why is not None and short is not None:
        # A torn last line is benign only when it is newer than the head the owner saw: here
        # a record the owner saw whole is gone or torn, so the file was cut or rewritten, and
        # nothing after the good records may be cut (it is the evidence).
        bad = ChainReport(check.head.seq, check.head, check.head.seq + 1, f"{cut_why}; {short}")
        return Scan(bad, good, None)
    if report.ok and (cut_why or torn_why):  # the line was never fed to the check
        report = replace(report, bad_line=report.records + 1, why=cut_why or torn_why)
    return Scan(replace(report, torn=cut_why is not None), good, cut_why)


def mismatch(f: BinaryIO, size: int, mark: Mark, name: str) -> str | None:
    """Why the file (of `size` bytes) does not hold `mark`'s record ending at `mark.size`,
    in one line; None when it does."""
    if mark.head.seq == 0:
        return None
    if size < mark.size:
        return (
            f"the ledger ends at byte {size}, before {name} (seq {mark.head.seq}, byte "
            f"{mark.size}): cut or rolled back"
        )
    line = line_ending_at(f, mark.size)
    if line is None or line_hash(line) != mark.head.hash:
        return f"the ledger no longer holds {name} (seq {mark.head.seq}): rewritten"
    return None


def read_line_at(f: BinaryIO, offset: int) -> bytes:
    """The line that starts at `offset`, without its newline."""
    f.seek(offset)
    return f.readline(MAX_LINE_BYTES + 1).rstrip(b"\n")


def read_call(f: BinaryIO, where: Where, key: tuple[str, str] | None) -> CallRecords | str:
    """The call's records, read back at the offsets the index gave (I8), or why not, in one
    line: a record that is not one (or, with `key`, not that call's) means the file changed
    under the index."""
    decision = _record_at(f, where.decision)
    if isinstance(decision, str):
        return decision
    if key is not None and (decision.get("session"), decision.get("call")) != key:
        return f"the record at byte {where.decision} is not the decision the index names"
    verdict = None if where.verdict is None else _record_at(f, where.verdict)
    if isinstance(verdict, str):
        return verdict
    executed = None if where.executed is None else _record_at(f, where.executed)
    if isinstance(executed, str):
        return executed
    return CallRecords(decision, verdict, executed)


def _record_at(f: BinaryIO, offset: int) -> Record | str:
    record = parse_line(read_line_at(f, offset))
    if isinstance(record, str):  # the file changed under the index
        return f"the record at byte {offset} is damaged ({record}): run bxctl audit verify"
    return record


def read_named(f: BinaryIO, key: str, value: str, offsets: list[int]) -> list[Record] | str:
    """The records whose `key` is `value` (a job's runs, a session's owner's words), read
    back at the offsets the index gave, or why not, in one line."""
    records = [parse_line(read_line_at(f, offset)) for offset in offsets]
    for offset, record in zip(offsets, records, strict=True):
        if isinstance(record, str) or record.get(key) != value:
            return f"the record at byte {offset} is not the {key}'s record the index names"
    return [record for record in records if not isinstance(record, str)]


def lines_backwards(f: BinaryIO, size: int) -> Iterator[bytes]:
    """The non-empty lines of the first `size` bytes, last first, read in blocks."""
    pending: list[bytes] = []  # the pieces of the line being read, last piece first
    pos = size
    while pos > 0:
        step = min(_BLOCK, pos)
        pos -= step
        f.seek(pos)
        parts = f.read(step).split(b"\n")
        pending.append(parts[-1])
        if len(parts) == 1:
            continue
        yield from _nonempty([b"".join(reversed(pending)), *reversed(parts[1:-1])])
        pending = [parts[0]]
    yield from _nonempty([b"".join(reversed(pending))])


def tail(
    path: Path,
    size: int,
    n: int,
    session: str | None,
    approval: Callable[[str], tuple[str, str] | None],
) -> list[Record]:
    """The last `n` records through byte `size`, oldest first; with `session`, only that
    session's (its decisions, verdicts, executions, raises, and absorbs as parent or child;
    `approval` names a verdict's call). Reads the file backwards; keeps nothing in memory."""
    found: list[Record] = []
    if n <= 0:
        return found
    try:
        with open(path, "rb") as f:
            for line in lines_backwards(f, size):
                try:
                    record = json.loads(line)
                except (ValueError, RecursionError):
                    continue
                if not isinstance(record, dict) or "kind" not in record:
                    continue
                if session is None or session in _sessions_of(record, approval):
                    found.append(record)
                    if len(found) == n:
                        break
    except OSError as e:
        raise LedgerUnavailable(f"cannot read {path}: {cause(e)}") from e
    found.reverse()
    return found


def _sessions_of(
    record: Record, approval: Callable[[str], tuple[str, str] | None]
) -> tuple[str, ...]:
    kind = record.get("kind")
    if kind == "absorbed":
        return (str(record.get("parent")), str(record.get("child")))
    if kind == "verdict":
        found = approval(str(record.get("approval")))
        return () if found is None else (found[0],)
    return (str(record["session"]),) if "session" in record else ()


def _nonempty(lines: list[bytes]) -> Iterator[bytes]:
    return (line for line in lines if line)


def cause(e: OSError, folder: Path | None = None) -> str:
    """Why an operation on the ledger failed, in one line; a write that found no room names
    the disk holding `folder` and the room left on it (issue 28)."""
    if folder is not None and disk.lacks_room(e):
        return disk.full(folder, disk.free_bytes(folder))
    return e.strerror or str(e) or type(e).__name__
