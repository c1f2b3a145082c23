"""The audit ledger's file (SPEC §7, I1, I8): `{home}/audit/ledger.jsonl`, append-only, with
brokerd's own durable head (`head`) and its index of calls beside it. Opening it and
what a start decides are `start`'s, reading records back `scan`'s; this module
holds its state, appends, and answers from its index.

The only writer of `{home}/audit/`; the I/O shell around the pure `records`. It never returns
before the fsync covering a record, never retries a failed fsync (it refuses until `reopen()`
has re-read the file), and turns every OSError into `LedgerUnavailable`, here, once. A cut or
rolled-back ledger is `broken` (every call `audit_unavailable`) until the owner accepts it as
it is (`accept`); only a torn line after the last confirmed record is ever cut.
"""

from __future__ import annotations

import contextlib
import enum
import os
import sqlite3
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

from bxcore.home import disk
from services.brokerd.core.records import (
    GENESIS,
    CallRecords,
    Entry,
    Head,
    Record,
    build_record,
    format_at,
    line_hash,
    recovered,
)
from services.brokerd.ledger import start as ledger_start
from services.brokerd.ledger.head import HEAD_FILE, read_confirmed, write_confirmed
from services.brokerd.ledger.index import INDEXED, START, Index, Mark, Where
from services.brokerd.ledger.scan import (
    INDEX_ERRORS,
    LedgerUnavailable,
    cause,
    mismatch,
    read_call,
    read_named,
    tail,
)
from services.brokerd.ledger.start import INDEX_FILE

__all__ = [
    "HEAD_FILE",
    "INDEX_FILE",
    "Ledger",
    "LedgerState",
    "LedgerUnavailable",
    "read_confirmed",
]


class LedgerState(enum.StrEnum):
    OK = "ok"  # appends are written
    LOADING = "loading"  # reading what the index does not hold yet
    FAILED = "failed"  # a write or fsync failed (or the file could not be opened): reopen()
    BROKEN = "broken"  # damaged, cut or rolled back: only the owner can mend it
    CLOSED = "closed"


class Ledger:
    """The open ledger. `open()` never raises for I/O: a ledger it cannot read or write opens
    `failed` (retry with `reopen()`), a damaged or cut one opens `broken`; both refuse every
    append with `LedgerUnavailable`, so brokerd starts and denies every call
    `audit_unavailable`.

    Thread-safe: every use of the file and the index holds one lock. One process at a time:
    the file is locked (flock) while open.
    """

    def __init__(
        self,
        path: Path,
        now_ms: Callable[[], int],
        fsync: Callable[[int], None],
        write: Callable[[int, bytes], int],
        witness_paths: Sequence[Path] = (),
        on_state: Callable[[LedgerState, str | None, int], None] = lambda *_: None,
    ) -> None:
        self.path = path
        self._now_ms, self._fsync, self._write = now_ms, fsync, write
        self._witness_paths = tuple(witness_paths)
        self._on_state = on_state
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._reader: int | None = None  # a read-only descriptor for lookups
        self._state = LedgerState.CLOSED
        self._problem: str | None = None
        self._head = Head(0, GENESIS)
        self._size = 0  # bytes confirmed (written and fsynced, or read and verified)
        self._verified = False  # head and size match the file: a reopen may cut after them
        self._written = START  # what head.json holds
        self._short: Mark | None = None  # a head the file fell short of (cut or rolled back)
        self._index: Index | None = None
        self._unindexed: list[tuple[Record, int]] = []  # appended; in the index at next use
        self.read_at_start = 0  # records the last start read (those its index did not hold)
        self.lacked_room = False  # failed because a write found its disk full (issue 28)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        now_ms: Callable[[], int],
        fsync: Callable[[int], None] = os.fsync,
        write: Callable[[int, bytes], int] = os.write,
        started: Mapping[str, object] | None = None,
        witness_paths: Sequence[Path] = (),
        on_state: Callable[[LedgerState, str | None, int], None] = lambda *_: None,
    ) -> Ledger:
        """Opens (creating the folder and file), verifies and recovers the ledger. With
        `started` ({pid, version}) a `started` record follows, in the same group commit as
        any `recovered` one. `fsync` and `write` are seams for tests. `load` does the same
        for a ledger made `unloaded` (brokerd answers `ping` meanwhile)."""
        ledger = cls.unloaded(
            path, now_ms=now_ms, fsync=fsync, write=write,
            witness_paths=witness_paths, on_state=on_state,
        )  # fmt: skip
        ledger.load(started)
        return ledger

    @classmethod
    def unloaded(
        cls,
        path: str | os.PathLike[str],
        *,
        now_ms: Callable[[], int],
        fsync: Callable[[int], None] = os.fsync,
        write: Callable[[int, bytes], int] = os.write,
        witness_paths: Sequence[Path] = (),
        on_state: Callable[[LedgerState, str | None, int], None] = lambda *_: None,
    ) -> Ledger:
        ledger = cls(Path(path), now_ms, fsync, write, witness_paths, on_state)
        ledger._set(LedgerState.LOADING, None)
        return ledger

    def load(self, started: Mapping[str, object] | None = None) -> None:
        """Read what the index does not hold, check the heads, recover (may take long when
        the index must be rebuilt: run it in a thread while serving)."""
        with self._lock:
            self._start(started, accept=False)

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
        """One line: why the ledger is loading, failed or broken (None when ok)."""
        return self._problem

    @property
    def cut_short(self) -> bool:
        """Broken because the file ends before (or no longer holds) a head brokerd or the
        owner saw: `accept` can take it as it is."""
        return self._state is LedgerState.BROKEN and self._short is not None

    def __repr__(self) -> str:
        problem = f" problem={self._problem!r}" if self._problem else ""
        return f"<Ledger {self.path} head={self._head} state={self._state}{problem}>"

    def __enter__(self) -> Ledger:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _set(self, state: LedgerState, problem: str | None) -> None:
        changed = (state, problem) != (self._state, self._problem)
        self._state, self._problem = state, problem
        if changed:
            self._on_state(state, problem, self._head.seq)

    # --- opening and recovery ----------------------------------------------------------------

    def reopen(self) -> None:
        """Closes the file and opens it again, re-verifying it: the only way out of `failed`.
        After a failure, what was written after the last confirmed record was never
        answered: it is cut (and a `recovered` record says so)."""
        with self._lock:
            if self._verified:
                self._reopen()
            else:
                self._start(None, accept=False)

    def accept(self) -> str:
        """The owner takes the ledger as it is, though it ends before a head brokerd or the
        owner saw (`cut_short`): it is read again whole, a `recovered` record says what was
        lost, and brokerd writes again. Returns that sentence; ValueError when the ledger is
        not cut short (nothing to accept), or is damaged inside (nothing to build on)."""
        with self._lock:
            if not self.cut_short or self._short is None:
                raise ValueError(f"the ledger is {self._state}: nothing to accept")
            problem = self._problem
            self._start(None, accept=True)
            if self._state is not LedgerState.OK:
                raise ValueError(f"the ledger is still {self._state}: {self._problem}")
            said = (
                f"the owner accepted the ledger as it is, at seq {self._head.seq} ({problem}); "
                "records confirmed or seen beyond what it holds are lost, and a call recorded "
                "only in them may run again if it is sent again"
            )
            self._append([recovered(cut_bytes=0, why=said)])
            self._write_confirmed()
            return said

    def close(self) -> None:
        """Releases the file; a later `reopen()` reads it afresh (another may have written)."""
        with self._lock:
            with contextlib.suppress(LedgerUnavailable):  # the state says why
                self._persist_index()
            if self._state is LedgerState.OK:
                with contextlib.suppress(OSError):
                    self._write_confirmed()
            self._close_fd()
            if self._index is not None:
                self._index.close()
                self._index = None
            self._verified = False
            self._set(LedgerState.CLOSED, None)

    def _close_fd(self) -> None:
        for fd in (self._fd, self._reader):
            if fd is not None:
                with contextlib.suppress(OSError):  # a failed close cannot be mended
                    os.close(fd)  # the writer's close also releases the flock
        self._fd = self._reader = None

    def _start(self, started: Mapping[str, object] | None, *, accept: bool) -> None:
        """Opening, from nothing known but the files (or, with `accept`, trusting neither
        head.json nor the witness: the owner took the ledger as it is)."""
        self._close_fd()
        self._unindexed.clear()  # what the index does not hold is read again below
        self._set(LedgerState.LOADING, "reading the ledger")
        try:
            self._fd = ledger_start.open_file(self.path, self._fsync)
            self._reader = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            size = os.fstat(self._fd).st_size
            confirmed = None if accept else read_confirmed(self.path.with_name(HEAD_FILE))
        except OSError as e:
            self._fail(f"cannot open {self.path}: {cause(e, self.path.parent)}", room=e)
            return
        except ValueError as e:
            self._broken(str(e), None)
            return
        if self._index is None:
            self._index = ledger_start.open_index(self.path)
        index = self._index
        if accept:
            index.reset()
        try:
            decided = ledger_start.decide(
                self.path, size, index, confirmed, self._witness_paths, accept=accept
            )
            if isinstance(decided, ledger_start.Broken):
                self._broken(decided.why, decided.short)
                return
        except OSError as e:
            self._fail(f"cannot read {self.path}: {cause(e)}")
            return
        found, start = decided.found, decided.start
        report = found.report
        self._head, self._size, self._short = report.head, found.good_bytes, None
        self.read_at_start = report.head.seq - start.head.seq
        self._verified = report.ok or found.cut_why is not None
        if not self._verified:
            self._broken(report.why or "damaged", None, cuttable=False)
            return
        self._state, self._problem = LedgerState.OK, None  # said once the start is written
        self._persist_index()
        entries: list[Entry] = [] if started is None else [("started", started)]
        if found.cut_why is not None:  # the cut and its record share the one fsync below
            try:
                os.ftruncate(self._fd, found.good_bytes)
            except OSError as e:
                self._fail(
                    f"cannot cut the torn end of {self.path}: {cause(e, self.path.parent)}", room=e
                )
                return
            entries.insert(0, recovered(cut_bytes=size - found.good_bytes, why=found.cut_why))
        if entries:
            with contextlib.suppress(LedgerUnavailable):  # the state says why
                self._append(entries)
        with contextlib.suppress(OSError):
            self._write_confirmed()
        self._on_state(self._state, self._problem, self._head.seq)

    def _reopen(self) -> None:
        """After a failure: the file must still hold what was confirmed; anything after it
        was never answered and is cut. Reads nothing else."""
        confirmed = Mark(self._head, self._size)
        self._close_fd()
        try:
            self._fd = ledger_start.open_file(self.path, self._fsync)
            self._reader = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            size = os.fstat(self._fd).st_size
            with open(self.path, "rb") as f:
                why = mismatch(f, size, confirmed, "the head this ledger confirmed")
            if why is not None:
                self._broken(why, confirmed)
                return
            entries: list[Entry] = []
            if size > confirmed.size:
                os.ftruncate(self._fd, confirmed.size)
                seq = confirmed.head.seq
                cut = f"line {seq + 1}: written after the last confirmed record (seq {seq})"
                entries.append(recovered(cut_bytes=size - confirmed.size, why=cut))
        except OSError as e:
            self._fail(f"cannot reopen {self.path}: {cause(e, self.path.parent)}", room=e)
            return
        self._set(LedgerState.OK, None)
        if entries:
            with contextlib.suppress(LedgerUnavailable):
                self._append(entries)

    def _broken(self, why: str, short: Mark | None, *, cuttable: bool = True) -> None:
        self._short = short if cuttable else None
        self._set(LedgerState.BROKEN, why)

    def _fail(self, problem: str, room: BaseException | None = None) -> None:
        """`failed`; `room`: the error, which says whether the write found no room."""
        self.lacked_room = room is not None and disk.lacks_room(room)
        self._set(LedgerState.FAILED, problem)

    # --- keeping what is derived --------------------------------------------------------------

    def persist(self) -> None:
        """Commit the index and write the confirmed head durably, if either moved: brokerd
        calls it every fraction of a second, off the answer path, and at stop."""
        with self._lock:
            with contextlib.suppress(LedgerUnavailable):  # the state says why
                self._persist_index()
            mark = Mark(self._head, self._size) if self._state is LedgerState.OK else None
        if mark is not None and mark != self._written:
            self._write_mark(mark)

    def _persist_index(self) -> None:
        index = self._indexed()  # it must hold every call up to the mark
        if index is not None and self._state is LedgerState.OK:
            index.mark(Mark(self._head, self._size))
            with contextlib.suppress(Exception):  # derived: a later start reads it again
                index.commit()

    def index_appended(self) -> None:
        """Put the calls appended since the last time into the index. brokerd does it once a
        batch's answers are out: the index is derived, and its rows cost as much as a
        decision's record, so they stay off the answer's way. Every use of the index does
        it first (`_indexed`), so that no lookup ever misses a call (I8)."""
        with self._lock, contextlib.suppress(LedgerUnavailable):  # the state says why
            self._indexed()

    def _indexed(self) -> Index | None:
        """The index, holding every record appended; LedgerUnavailable when it cannot."""
        if not self._unindexed or self._index is None:
            return self._index
        added, self._unindexed = self._unindexed, []
        try:
            self._index.add_all(added)
        except sqlite3.Error as e:
            # The records are durable, but the once-per-call rule can no longer be kept:
            # refuse until a reopen has built the index again (from the file, if need be).
            self._index.close()
            self._index, self._verified = None, False
            self._fail(f"cannot write the ledger's index: {e}")
            raise LedgerUnavailable(f"the ledger failed: {self._problem}") from e
        return self._index

    def _write_confirmed(self) -> None:
        self._write_mark(Mark(self._head, self._size))

    def _write_mark(self, mark: Mark) -> None:
        """head.json (`head`), only after the ledger's fsync."""
        write_confirmed(self.path.with_name(HEAD_FILE), mark)
        self._written = mark

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
        offset = self._size
        self._head, self._size = heads[-1], self._size + len(data)
        for line, record in zip(lines, built, strict=True):
            if record["kind"] in INDEXED:  # as a reader would parse it back
                self._unindexed.append((record, offset))
            offset += len(line) + 1
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
            why = cause(e, self.path.parent) if isinstance(e, OSError) else e
            self._fail(f"cannot {step} {self.path}: {why}", room=e)
            if isinstance(e, OSError):
                raise LedgerUnavailable(f"the ledger failed: {self._problem}") from e
            raise

    # --- reading -----------------------------------------------------------------------------

    def lookup(self, session: str, call: str) -> CallRecords | None:
        """That call's records (I8), or None if it was never decided. LedgerUnavailable when
        the ledger cannot say (an index that fails, a record that does not read back)."""
        with self._lock, INDEX_ERRORS:
            index = self._indexed()
            if index is None:
                return None
            self._readable()
            where = index.lookup(session, call)
            return None if where is None else self._records(where, (session, call))

    def unsettled(self) -> list[CallRecords]:
        """The calls waiting for the owner, in the order they were decided (to rebuild
        the pending approvals)."""
        with self._lock:
            self._readable()
            index = self._indexed()
            found = [] if index is None else index.unsettled()
            return [self._records(where, None) for where in found]

    def scoped(self) -> list[CallRecords]:
        """The calls approved for their whole session (to rebuild those scopes)."""
        with self._lock:
            self._readable()
            index = self._indexed()
            found = [] if index is None else index.scoped()
            return [self._records(where, None) for where in found]

    def approval(self, approval_id: str) -> tuple[str, str] | None:
        """The (session, call) an approval id was made for, or None."""
        with self._lock, INDEX_ERRORS:
            self._readable()
            index = self._indexed()
            return None if index is None else index.approval(approval_id)

    def _readable(self) -> None:
        """A broken ledger says nothing of what it holds: its index may name records the file
        lost (a call "already ran" that the owner may yet decide is lost), or a rewrite."""
        if self._state not in (LedgerState.OK, LedgerState.FAILED):
            raise LedgerUnavailable(f"the ledger is {self._state}: {self._problem or 'closed'}")

    def _records(self, where: Where, key: tuple[str, str] | None) -> CallRecords:
        """The call's records, read back at the offsets the index gave; a record that is not
        one (or not that call's) means the file changed under the index: broken."""
        if self._reader is None:
            raise LedgerUnavailable(f"the ledger is {self._state}: {self._problem or 'closed'}")
        with os.fdopen(os.dup(self._reader), "rb") as f:
            found = read_call(f, where, key)
        if isinstance(found, str):
            self._broken(found, None, cuttable=False)
            raise LedgerUnavailable(found)
        return found

    def job_records(self, job: str, runs: int, run: int | None = None) -> list[Record]:
        """The `job_started` and `job_ended` records of `job`'s last `runs` runs (or of run
        `run` alone), oldest first (§19)."""
        with self._lock, INDEX_ERRORS:
            self._readable()
            index = self._indexed()
            if index is None or self._reader is None:
                return []
            found = index.job_runs(job, runs) if run is None else [index.job_run(job, run)]
            offsets = [offset for pair in found for offset in pair if offset is not None]
            with os.fdopen(os.dup(self._reader), "rb") as f:
                records = read_named(f, "job", job, offsets)
        if isinstance(records, str):
            raise LedgerUnavailable(records)
        return records

    def owner_words(self, session: str) -> list[Record]:
        """The `owner_words` records of `session`, in turn order (§20)."""
        with self._lock, INDEX_ERRORS:
            self._readable()
            index = self._indexed()
            if index is None or self._reader is None:
                return []
            offsets = [offset for _, offset in index.words(session)]
            with os.fdopen(os.dup(self._reader), "rb") as f:
                records = read_named(f, "session", session, offsets)
        if isinstance(records, str):
            raise LedgerUnavailable(records)
        return records

    def tail(self, n: int, session: str | None = None) -> list[Record]:
        """The last `n` records, oldest first; with `session`, only that session's
        (`scan.tail`)."""
        with self._lock:
            size = self._size
        return tail(self.path, size, n, session, self.approval)
