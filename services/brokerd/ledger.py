"""The audit ledger's file (SPEC §7, I1, I8): `{home}/audit/ledger.jsonl`, append-only.

The only writer of `{home}/audit/`; the I/O shell around the pure `records`. It never returns
before the fsync covering a record, never retries a failed fsync (it refuses until `reopen()`
has re-read the file), and turns every OSError into `LedgerUnavailable`, here, once.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import json
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from services.brokerd.chain import ChainCheck, ChainReport
from services.brokerd.index import INDEXED, CallRecords, Index
from services.brokerd.records import (
    GENESIS,
    MAX_LINE_BYTES,
    Entry,
    Head,
    Record,
    build_record,
    format_at,
    line_hash,
    recovered,
)

_BLOCK = 64 * 1024


class LedgerUnavailable(Exception):
    """The ledger cannot be written: every call is denied `audit_unavailable` (§7)."""


class LedgerState(enum.StrEnum):
    OK = "ok"  # appends are written
    FAILED = "failed"  # a write or fsync failed (or the file could not be opened): reopen()
    BROKEN = "broken"  # the chain is damaged before its last line: only the owner can mend it
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class _Scan:
    report: ChainReport
    good_bytes: int  # the offset just after the last good line
    cut_why: str | None  # set when everything after good_bytes may be cut (never answered)


def _read_lines(f: BinaryIO) -> Iterator[tuple[bytes, bool, int]]:
    """(line without newline, whether it ended with one, offset after it). Never holds more
    than MAX_LINE_BYTES + 1 bytes of one line: a longer one is yielded cut (and is bad)."""
    offset = 0
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


def _scan(
    f: BinaryIO,
    on_record: Callable[[Record], None] | None = None,
    *,
    confirmed: Head | None = None,
    witness: Head | None = None,
) -> _Scan:
    """Walks the file. The last line may be cut when it never ended, or is no record at all;
    with `confirmed` (the head this process last fsynced), everything after it may be cut."""
    size = os.fstat(f.fileno()).st_size
    if confirmed is not None:
        check = ChainCheck(confirmed, "the head this ledger confirmed")
    else:
        check = ChainCheck(witness)
    good = 0
    cut_why: str | None = None  # everything after `good` was never answered
    torn_why: str | None = None  # a line that never ended, where nothing may be cut
    for line, ended, end in _read_lines(f):
        number = check.head.seq + 1
        if confirmed is not None and check.head.seq == confirmed.seq:
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
        good = end
        if on_record is not None:
            on_record(record)
    report = check.report()
    short = check.short_of_witness()  # only with a witness (never with `confirmed`)
    if cut_why is not None and short is not None:
        # A torn last line is benign only when it is newer than the head the owner saw: here
        # a record the owner saw whole is gone or torn, so the file was cut or rewritten, and
        # nothing after the good records may be cut (it is the evidence).
        bad = ChainReport(check.head.seq, check.head, check.head.seq + 1, f"{cut_why}; {short}")
        return _Scan(bad, good, None)
    if report.ok and (cut_why or torn_why):  # the line was never fed to the check
        report = replace(report, bad_line=report.records + 1, why=cut_why or torn_why)
    return _Scan(replace(report, torn=cut_why is not None), good, cut_why)


def verify(path: str | os.PathLike[str], *, witness: Head | None = None) -> ChainReport:
    """Checks the whole file without writing (`bxctl audit verify`). `str(report)` is
    `ok: N records` or the first bad line; a torn last line is reported (`torn`), as brokerd
    will cut it at its next start. `witness`: the newest head the owner saw (§7); a torn last
    line at or before its seq is not `torn` but tampering: the owner saw that record whole."""
    try:
        with open(path, "rb") as f:
            return _scan(f, witness=witness).report
    except OSError as e:
        raise LedgerUnavailable(f"cannot read the ledger {path}: {_cause(e)}") from e


def _cause(e: OSError) -> str:
    return e.strerror or str(e) or type(e).__name__


def _fsync_folder(folder: Path, fsync: Callable[[int], None]) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fsync(fd)
    finally:
        os.close(fd)


class Ledger:
    """The open ledger. `open()` never raises for I/O: a ledger it cannot read or write opens
    `failed` (retry with `reopen()`), a damaged one opens `broken`; both refuse every append
    with `LedgerUnavailable`, so brokerd starts and denies every call `audit_unavailable`.

    Thread-safe: appends, reopen and close hold one lock; `lookup` and `approval` read the
    index without it. One process at a time: the file is locked (flock) while open.
    """

    def __init__(
        self,
        path: Path,
        now_ms: Callable[[], int],
        fsync: Callable[[int], None],
        write: Callable[[int, bytes], int],
    ) -> None:
        self.path = path
        self._now_ms, self._fsync, self._write = now_ms, fsync, write
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._state = LedgerState.CLOSED
        self._problem: str | None = None
        self._head = Head(0, GENESIS)
        self._size = 0  # bytes confirmed (written and fsynced, or read and verified)
        self._verified = False  # head and size match the file: a reopen may cut after them
        self._index = Index()

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        now_ms: Callable[[], int],
        fsync: Callable[[int], None] = os.fsync,
        write: Callable[[int, bytes], int] = os.write,
        started: Mapping[str, object] | None = None,
    ) -> Ledger:
        """Opens (creating the folder and file), verifies and recovers the ledger. With
        `started` ({pid, version}) a `started` record follows, in the same group commit as
        any `recovered` one. `fsync` and `write` are seams for tests."""
        ledger = cls(Path(path), now_ms, fsync, write)
        with ledger._lock:
            ledger._load(started)
        return ledger

    # --- state -----------------------------------------------------------------------------

    @property
    def head(self) -> Head:
        return self._head

    @property
    def size(self) -> int:
        """The ledger's length in bytes through the head's line (what is confirmed)."""
        return self._size

    @property
    def state(self) -> LedgerState:
        return self._state

    @property
    def problem(self) -> str | None:
        """One line: why the ledger is failed or broken (None when ok)."""
        return self._problem

    def __repr__(self) -> str:
        problem = f" problem={self._problem!r}" if self._problem else ""
        return f"<Ledger {self.path} head={self._head} state={self._state}{problem}>"

    def __enter__(self) -> Ledger:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # --- opening and recovery ----------------------------------------------------------------

    def reopen(self) -> None:
        """Closes the file and opens it again, re-verifying it: the only way out of `failed`.
        After a failure, what was written after the last confirmed record was never
        answered: it is cut (and a `recovered` record says so)."""
        with self._lock:
            self._load(None)

    def close(self) -> None:
        """Releases the file; a later `reopen()` reads it afresh (another may have written)."""
        with self._lock:
            self._close_fd()
            self._state, self._problem, self._verified = LedgerState.CLOSED, None, False

    def _close_fd(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            # A failed close cannot be mended; the file is re-read on open anyway.
            with contextlib.suppress(OSError):
                os.close(fd)  # also releases the flock

    def _load(self, started: Mapping[str, object] | None) -> None:
        self._close_fd()
        confirmed = self._head if self._verified else None
        try:
            self._fd = self._open_file()
            index = Index()
            with open(self.path, "rb") as f:
                scan = _scan(f, index.add, confirmed=confirmed)
        except OSError as e:
            self._fail(f"cannot open {self.path}: {_cause(e)}")
            return
        report = scan.report
        self._index, self._head, self._size = index, report.head, scan.good_bytes
        self._verified = report.ok or scan.cut_why is not None
        if not self._verified:
            self._state, self._problem = LedgerState.BROKEN, report.why
            return
        self._state, self._problem = LedgerState.OK, None
        entries: list[Entry] = [] if started is None else [("started", started)]
        if scan.cut_why is not None:  # the cut and its record share the one fsync below
            try:
                size = os.fstat(self._fd).st_size
                os.ftruncate(self._fd, scan.good_bytes)
            except OSError as e:
                self._fail(f"cannot cut the torn end of {self.path}: {_cause(e)}")
                return
            entries.insert(0, recovered(cut_bytes=size - scan.good_bytes, why=scan.cut_why))
        if entries:
            with contextlib.suppress(LedgerUnavailable):  # the state says why
                self._append(entries)

    def _open_file(self) -> int:
        folder = self.path.parent
        if not folder.is_dir():
            folder.mkdir(mode=0o700, parents=True)
            _fsync_folder(folder.parent, self._fsync)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        existed = self.path.exists()
        fd = os.open(self.path, flags, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as e:
                raise OSError(e.errno, "another process holds the ledger open") from e
            if not existed:
                _fsync_folder(folder, self._fsync)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _fail(self, problem: str) -> None:
        self._state, self._problem = LedgerState.FAILED, problem

    # --- appending ---------------------------------------------------------------------------

    def append(self, kind: str, fields: Mapping[str, object]) -> Head:
        """One record; see `append_batch`."""
        return self.append_batch([(kind, fields)])[0]

    def append_batch(self, entries: Sequence[Entry]) -> list[Head]:
        """Writes the records with one write and one fsync (group commit), all with one `at`,
        and returns the head after each. Only then may anything that depends on them be
        answered or run. Raises `LedgerUnavailable` (the ledger is then `failed`: every
        later append raises at once, touching nothing, until `reopen()`), or ValueError for
        an entry no record can hold (nothing written, state unchanged)."""
        with self._lock:
            return self._append(entries)

    def _append(self, entries: Sequence[Entry]) -> list[Head]:
        if self._state is not LedgerState.OK or self._fd is None:
            raise LedgerUnavailable(f"the ledger is {self._state}: {self._problem or 'closed'}")
        if not entries:
            return []
        at = format_at(self._now_ms())
        seq, prev = self._head.seq, self._head.hash
        lines: list[bytes] = []
        heads: list[Head] = []
        built: list[Record] = []
        for kind, fields in entries:
            seq += 1
            line, record = build_record(seq, at, prev, kind, fields)
            prev = line_hash(line)
            lines.append(line)
            built.append(record)
            heads.append(Head(seq, prev))
        data = b"\n".join(lines) + b"\n"
        self._commit(self._fd, data)
        self._head, self._size = heads[-1], self._size + len(data)
        for record in built:
            if record["kind"] in INDEXED:  # as a reader would parse it back
                self._index.add(record)
        return heads

    def _commit(self, fd: int, data: bytes) -> None:
        step = "write"
        try:
            while data:  # a short write is continued (a copy only then)
                written = self._write(fd, data)
                if written <= 0:
                    raise OSError(0, "the write wrote nothing")
                data = data[written:]
            step = "fsync"
            self._fsync(fd)
        except BaseException as e:  # whatever it was, the file's end is now unknown
            self._fail(f"cannot {step} {self.path}: {_cause(e) if isinstance(e, OSError) else e}")
            if isinstance(e, OSError):
                raise LedgerUnavailable(f"the ledger failed: {self._problem}") from e
            raise

    # --- reading -----------------------------------------------------------------------------

    def lookup(self, session: str, call: str) -> CallRecords | None:
        """That call's records (I8), or None if it was never decided."""
        return self._index.calls.get((session, call))

    def calls(self) -> list[CallRecords]:
        """Every call's records, in the order they were decided (to rebuild approvals)."""
        return list(self._index.calls.values())

    def approval(self, approval_id: str) -> tuple[str, str] | None:
        """The (session, call) an approval id was made for, or None."""
        return self._index.approvals.get(approval_id)

    def tail(self, n: int, session: str | None = None) -> list[Record]:
        """The last `n` records, oldest first; with `session`, only that session's (its
        decisions, verdicts, executions, raises, and absorbs as parent or child). Reads the
        file backwards from the last confirmed byte; keeps nothing in memory."""
        with self._lock:
            size = self._size
        found: list[Record] = []
        if n <= 0:
            return found
        try:
            with open(self.path, "rb") as f:
                for line in _lines_backwards(f, size):
                    try:
                        record = json.loads(line)
                    except (ValueError, RecursionError):
                        continue
                    if not isinstance(record, dict) or "kind" not in record:
                        continue
                    if session is None or session in self._index.session_of(record):
                        found.append(record)
                        if len(found) == n:
                            break
        except OSError as e:
            raise LedgerUnavailable(f"cannot read {self.path}: {_cause(e)}") from e
        found.reverse()
        return found


def _lines_backwards(f: BinaryIO, size: int) -> Iterator[bytes]:
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


def _nonempty(lines: list[bytes]) -> Iterator[bytes]:
    return (line for line in lines if line)
