"""The ledger's index of calls (SPEC §7, I8): (session, call) to where that call's records lie
in the ledger, and approval id to its call. Kept in SQLite at `{home}/audit/index.sqlite3`, so
that neither brokerd's memory nor its start grows with the ledger (issue 10).

The index is derived, never the truth: it says up to which record of the ledger it holds
(`covered`), and the ledger reads again from there at every start, or from its first line
when the index does not match the file. So rows are written after their records are durable
(once the answers are out, or at the index's next use: `Ledger.index_appended`) and
committed lazily (`commit`), with no fsync of their own: whatever a crash loses of them, the
next start takes again from the ledger, whose records were fsynced first. The first record of
each sort wins (a call is decided, settled and run once). Only a `pending` decision names an
approval; a verdict reaches its call through it.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from services.brokerd.core.records import GENESIS, Head, Record

INDEXED = frozenset({"decision", "verdict", "executed", "job_started", "job_ended", "owner_words"})
_INDEXED_KINDS = tuple(f'{kind}"'.encode() for kind in sorted(INDEXED))
SCHEMA_VERSION = "3"  # 2: job runs (issue 16); 3: the owner's words (issue 24)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS calls (
    session TEXT NOT NULL,
    call TEXT NOT NULL,
    decision INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    approval TEXT,
    verdict INTEGER,
    scope TEXT,
    executed INTEGER,
    PRIMARY KEY (session, call)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS approvals (
    approval TEXT PRIMARY KEY, session TEXT NOT NULL, call TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS jobs (
    job TEXT NOT NULL, run INTEGER NOT NULL, started INTEGER, ended INTEGER,
    PRIMARY KEY (job, run)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS words (
    session TEXT NOT NULL, turn INTEGER NOT NULL, offset INTEGER NOT NULL,
    PRIMARY KEY (session, turn)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS unsettled ON calls (decision)
    WHERE outcome = 'pending' AND verdict IS NULL;
CREATE INDEX IF NOT EXISTS scoped ON calls (decision) WHERE scope = 'session';
"""


_INSERT_CALL = (
    "INSERT OR IGNORE INTO calls (session, call, decision, outcome, approval) "
    "VALUES (?, ?, ?, ?, ?)"
)


@dataclass(frozen=True, slots=True)
class Where:
    """Where one call's records start in the ledger (byte offsets of their lines)."""

    decision: int
    verdict: int | None = None
    executed: int | None = None


@dataclass(frozen=True, slots=True)
class Mark:
    """A record of the ledger and the file's length through its line."""

    head: Head
    size: int


START = Mark(Head(0, GENESIS), 0)


class IndexError_(Exception):
    """The index file cannot be used; the ledger rebuilds it."""


class Index:
    """The index on one file (`None`: in memory, for tests and a ledger that cannot keep
    one). Not thread-safe: the ledger holds its lock around every use."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._db = self._connect()

    def __repr__(self) -> str:
        return f"Index({self.path or 'in memory'}, covered {self.covered.head.seq})"

    def _connect(self) -> sqlite3.Connection:
        target = str(self.path) if self.path is not None else ":memory:"
        try:
            if self.path is not None:
                _private_file(self.path)
            db = sqlite3.connect(target, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")  # derived data: a lost tail is read again
            db.executescript(_SCHEMA)
            version = db.execute("SELECT value FROM meta WHERE key = 'version'").fetchone()
            if version is None:
                db.execute("INSERT INTO meta VALUES ('version', ?)", (SCHEMA_VERSION,))
            elif version[0] != SCHEMA_VERSION:
                db.close()
                raise IndexError_(f"index schema {version[0]}, not {SCHEMA_VERSION}")
            db.execute("BEGIN")
        except (sqlite3.Error, OSError) as error:
            raise IndexError_(f"cannot use {target}: {error}") from error
        return db

    @property
    def covered(self) -> Mark:
        """Up to which record of the ledger the index holds its calls."""
        rows = dict(self._db.execute("SELECT key, value FROM meta WHERE key LIKE 'covered_%'"))
        try:
            seq, hash_, size = rows["covered_seq"], rows["covered_hash"], rows["covered_size"]
        except KeyError:
            return START
        return Mark(Head(int(seq), hash_), int(size))

    def add_all(self, added: list[tuple[Record, int]]) -> None:
        """Records appended at their offsets, in order (`add`): a run of decisions that name
        no approval, most of a batch, is inserted with one statement."""
        run: list[tuple[str, str, int, object, None]] = []
        for record, offset in added:
            if record["kind"] == "decision" and record["outcome"] != "pending":
                run.append(
                    (str(record["session"]), str(record["call"]), offset, record["outcome"], None)
                )
                continue
            if run:
                self._db.executemany(_INSERT_CALL, run)
                run = []
            self.add(record, offset)
        if run:
            self._db.executemany(_INSERT_CALL, run)

    def add(self, record: Record, offset: int) -> None:
        """A record appended at `offset`; records of other kinds are ignored."""
        kind = record["kind"]
        if kind == "decision":
            session, call = str(record["session"]), str(record["call"])
            approval = record.get("approval")
            pending = record["outcome"] == "pending" and isinstance(approval, str)
            inserted = self._db.execute(
                _INSERT_CALL,
                (session, call, offset, record["outcome"], approval if pending else None),
            ).rowcount
            if inserted and pending:
                self._db.execute(
                    "INSERT OR IGNORE INTO approvals VALUES (?, ?, ?)", (approval, session, call)
                )
        elif kind == "verdict":
            found = self.approval(str(record["approval"]))
            if found is not None:
                self._db.execute(
                    "UPDATE calls SET verdict = ?, scope = ? "
                    "WHERE session = ? AND call = ? AND verdict IS NULL",
                    (offset, record.get("scope") if record.get("approve") else None, *found),
                )
        elif kind == "executed":
            self._db.execute(
                "UPDATE calls SET executed = ? WHERE session = ? AND call = ? AND executed IS NULL",
                (offset, str(record["session"]), str(record["call"])),
            )
        elif kind == "owner_words":
            self._db.execute(
                "INSERT OR IGNORE INTO words VALUES (?, ?, ?)",
                (str(record["session"]), record["turn"], offset),
            )
        elif kind in ("job_started", "job_ended"):
            column = "started" if kind == "job_started" else "ended"
            key = (str(record["job"]), record["run"])
            self._db.execute("INSERT OR IGNORE INTO jobs (job, run) VALUES (?, ?)", key)
            self._db.execute(
                f"UPDATE jobs SET {column} = ? WHERE job = ? AND run = ? AND {column} IS NULL",
                (offset, *key),
            )

    def add_line(self, line: bytes, offset: int) -> None:
        """A record's canonical line (from `verify.walk_fast`, which checked its chain): parsed
        only when its kind is one the index keeps."""
        kind = line.find(b'"kind":"') + 8
        if line.startswith(_INDEXED_KINDS, kind):
            self.add(json.loads(line), offset)

    def mark(self, covered: Mark) -> None:
        """The index now holds every call up to `covered` (in the open transaction)."""
        self._db.executemany(
            "INSERT OR REPLACE INTO meta VALUES (?, ?)",
            [
                ("covered_seq", str(covered.head.seq)),
                ("covered_hash", covered.head.hash),
                ("covered_size", str(covered.size)),
            ],
        )

    def commit(self) -> None:
        """Make what was added visible to a later start (no fsync: see the docstring)."""
        try:
            self._db.execute("COMMIT")
        finally:
            self._db.execute("BEGIN")

    def lookup(self, session: str, call: str) -> Where | None:
        row = self._db.execute(
            "SELECT decision, verdict, executed FROM calls WHERE session = ? AND call = ?",
            (session, call),
        ).fetchone()
        return None if row is None else Where(*row)

    def approval(self, approval_id: str) -> tuple[str, str] | None:
        """The (session, call) an approval id was made for, or None."""
        row = self._db.execute(
            "SELECT session, call FROM approvals WHERE approval = ?", (approval_id,)
        ).fetchone()
        return None if row is None else (row[0], row[1])

    def unsettled(self) -> list[Where]:
        """The calls waiting for the owner: pending, with no verdict yet."""
        rows = self._db.execute(
            "SELECT decision, verdict, executed FROM calls "
            "WHERE outcome = 'pending' AND verdict IS NULL ORDER BY decision"
        )
        return [Where(*row) for row in rows]

    def scoped(self) -> list[Where]:
        """The calls whose approval was given for their whole session (§9.2)."""
        rows = self._db.execute(
            "SELECT decision, verdict, executed FROM calls WHERE scope = 'session' "
            "ORDER BY decision"
        )
        return [Where(*row) for row in rows]

    def job_run(self, job: str, run: int) -> tuple[int | None, int | None]:
        """Where a job's run's `job_started` and `job_ended` records are (None: not written)."""
        row = self._db.execute(
            "SELECT started, ended FROM jobs WHERE job = ? AND run = ?", (job, run)
        ).fetchone()
        return (None, None) if row is None else (row[0], row[1])

    def job_runs(self, job: str, n: int) -> list[tuple[int | None, int | None]]:
        """The last `n` runs of `job`, oldest first: where their records are."""
        rows = self._db.execute(
            "SELECT started, ended FROM jobs WHERE job = ? ORDER BY run DESC LIMIT ?", (job, n)
        ).fetchall()
        return [(row[0], row[1]) for row in reversed(rows)]

    def words(self, session: str) -> list[tuple[int, int]]:
        """Each turn of `session` whose owner's words were recorded, with where, in turn
        order."""
        rows = self._db.execute(
            "SELECT turn, offset FROM words WHERE session = ? ORDER BY turn", (session,)
        ).fetchall()
        return [(row[0], row[1]) for row in rows]

    def reset(self) -> None:
        """Forget everything: the ledger will be read again from its first line."""
        self._db.execute("DELETE FROM words")
        self._db.execute("DELETE FROM jobs")
        self._db.execute("DELETE FROM calls")
        self._db.execute("DELETE FROM approvals")
        self._db.execute("DELETE FROM meta WHERE key LIKE 'covered_%'")
        self.commit()

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._db.execute("COMMIT")
        self._db.close()


def _private_file(path: Path) -> None:
    """The index file made 0600 before SQLite opens it (its -wal and -shm files copy that
    mode), as the ledger beside it: SQLite alone would make it 0644 under the usual umask."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
