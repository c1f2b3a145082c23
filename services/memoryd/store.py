"""The notes (SPEC §11): one SQLite file in WAL mode with FTS5, and the once table of answers.

The only code that touches `{home}/memory/`. Every session sees every note: all are the owner's,
and each keeps its writer's label. A recall carries the join of every note it searched (the whole
store), not only of those it returns: "no notes match" tells about the notes too (§5.5).
`forget` deletes only a note whose class is at most the caller's, and answers a note above it as
one that is not there (issue 14). `note` and `forget` remember their answer by (session, call)
in the same transaction (I8).
No clock for data (`now_ms` is given); every operation is bounded by `QUERY_S` and `BUSY_S`.
What a query's words become and how a recall's answer reads are `recall`'s.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from bxcore.clock import rfc3339
from bxcore.home import disk
from bxcore.labels import CLEAN, DataClass, Label
from services.memoryd.recall import Answer, match_expression, render_recall, store_label

RECALL_LIMIT = 10
BUSY_S = 2.0  # how long a statement waits for a lock held by another connection
QUERY_S = 2.0  # how long one operation may run before SQLite interrupts it
SCHEMA_VERSION = 1

_SCHEMA = (
    """CREATE TABLE notes (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        session TEXT NOT NULL,
        call TEXT NOT NULL,
        text TEXT NOT NULL,
        class TEXT NOT NULL CHECK (class IN ('public', 'private', 'secret')),
        untrusted INTEGER NOT NULL CHECK (untrusted IN (0, 1)),
        created TEXT NOT NULL
    )""",
    """CREATE VIRTUAL TABLE notes_fts USING fts5(
        text, content='notes', content_rowid='id',
        tokenize='porter unicode61 remove_diacritics 2'
    )""",
    """CREATE TRIGGER notes_added AFTER INSERT ON notes BEGIN
        INSERT INTO notes_fts (rowid, text) VALUES (new.id, new.text);
    END""",
    """CREATE TRIGGER notes_removed AFTER DELETE ON notes BEGIN
        INSERT INTO notes_fts (notes_fts, rowid, text) VALUES ('delete', old.id, old.text);
    END""",
    """CREATE TABLE calls (
        session TEXT NOT NULL,
        call TEXT NOT NULL,
        arguments TEXT NOT NULL,
        ok INTEGER NOT NULL CHECK (ok IN (0, 1)),
        output TEXT NOT NULL,
        class TEXT NOT NULL CHECK (class IN ('public', 'private', 'secret')),
        untrusted INTEGER NOT NULL CHECK (untrusted IN (0, 1)),
        created TEXT NOT NULL,
        PRIMARY KEY (session, call)
    ) WITHOUT ROWID""",
)


# What `Store.searched_label` reads: each lets an `EXISTS` stop at the first matching row, so
# the label of the whole store costs three index lookups, not a scan (100,000 notes: 0.02 ms
# against 30 ms for a MAX over the table). Created if missing, so a store of schema 1 gains them.
_LABEL_INDEXES = (
    "CREATE INDEX IF NOT EXISTS notes_class ON notes (class)",
    "CREATE INDEX IF NOT EXISTS notes_untrusted ON notes (untrusted)",
)
_STORE_LABEL = (
    "SELECT EXISTS (SELECT 1 FROM notes WHERE class = 'secret'),"
    " EXISTS (SELECT 1 FROM notes WHERE class = 'private'),"
    " EXISTS (SELECT 1 FROM notes WHERE untrusted = 1)"
)


class StoreError(Exception):
    """The store cannot do what was asked; the text is one line that says why."""


class CallReused(StoreError):
    """A (session, call) that already ran comes again with other arguments."""

    @classmethod
    def of(cls, session: str, call: str) -> CallReused:
        return cls(f"call {call} of session {session} already ran with other arguments")


@dataclass(frozen=True, slots=True)
class Remembered:
    """The answer a call got the first time, and the arguments it came with."""

    arguments: str
    answer: Answer


@dataclass(frozen=True, slots=True)
class StoredNote:
    id: int
    session: str
    call: str
    text: str
    label: Label
    created: str


class Store:
    """An open memory store. Use `Store.open(path)`; close it with `close()`."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self._conn = conn
        self._closed = False
        self._deadline = time.monotonic() + QUERY_S
        conn.set_progress_handler(self._overdue, 1000)

    def __repr__(self) -> str:
        return f"Store({self.path}, {'closed' if self._closed else 'open'})"

    @classmethod
    def open(cls, path: Path) -> Store:
        """Open (or create) the store at `path`: the folder 0700, the file 0600, WAL mode."""
        try:
            _private_folder(path.parent)
            _private_file(path)
            conn = sqlite3.connect(path, timeout=BUSY_S, isolation_level=None)
        except (OSError, sqlite3.Error, StoreError) as error:
            raise StoreError(f"cannot open the memory store {path}: {_why(error)}") from None
        conn.text_factory = lambda data: data.decode("utf-8", "replace")
        store = cls(path, conn)
        try:
            store._prepare()
        except (sqlite3.Error, StoreError) as error:
            conn.close()
            raise StoreError(f"cannot open the memory store {path}: {_why(error)}") from None
        return store

    def close(self) -> None:
        self._closed = True
        self._conn.close()

    def _prepare(self) -> None:
        self._deadline = time.monotonic() + QUERY_S
        mode = self._conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StoreError(f"WAL mode is not available (journal mode {mode})")
        self._conn.execute("PRAGMA synchronous = FULL")  # an answer is durable before it is sent
        with self._transaction():
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
            if version == 0:
                for statement in _SCHEMA:
                    self._conn.execute(statement)
                self._conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            elif version != SCHEMA_VERSION:
                raise StoreError(f"schema version {version}: made by another memoryd")
            for statement in _LABEL_INDEXES:  # also into a store made before they existed
                self._conn.execute(statement)

    def _overdue(self) -> int:
        return 1 if time.monotonic() > self._deadline else 0

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            if self._conn.in_transaction:  # SQLite may have rolled back already (interrupted)
                self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    @contextmanager
    def _snapshot(self) -> Iterator[None]:
        """A read transaction: every statement in it sees the store as of its first read."""
        self._conn.execute("BEGIN DEFERRED")
        try:
            yield
        except BaseException:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    @contextmanager
    def _operation(self, what: str) -> Iterator[None]:
        """One public operation: a fresh time budget, SQLite's errors as `StoreError`."""
        self._deadline = time.monotonic() + QUERY_S
        try:
            yield
        except sqlite3.Error as error:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            folder = self.path.parent
            full = disk.lacks_room(error)
            why = disk.full(folder, disk.free_bytes(folder)) if full else _why(error)
            raise StoreError(f"the memory store could not {what}: {why}") from None

    # -- the once table ----------------------------------------------------------------------

    def remembered(self, session: str, call: str) -> Remembered | None:
        """The answer (session, call) got before, if it ran."""
        with self._operation("look up a call"):
            return self._remembered(session, call)

    def _remembered(self, session: str, call: str) -> Remembered | None:
        row = self._conn.execute(
            "SELECT arguments, ok, output, class, untrusted FROM calls"
            " WHERE session = ? AND call = ?",
            (session, call),
        ).fetchone()
        if row is None:
            return None
        arguments, ok, output, class_, untrusted = row
        return Remembered(arguments, Answer(bool(ok), output, _label(class_, untrusted)))

    def _once(
        self, session: str, call: str, arguments: str, now_ms: int, act: Callable[[], Answer]
    ) -> Answer:
        with self._transaction():
            before = self._remembered(session, call)
            if before is not None:
                if before.arguments != arguments:
                    raise CallReused.of(session, call)
                return before.answer
            answer = act()
            self._conn.execute(
                "INSERT INTO calls (session, call, arguments, ok, output, class, untrusted,"
                " created) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (session, call, arguments, int(answer.ok), answer.output,
                 answer.label.class_.value, int(answer.label.untrusted), rfc3339(now_ms)),
            )  # fmt: skip
            return answer

    # -- the three actions -------------------------------------------------------------------

    def note(
        self, session: str, call: str, arguments: str, text: str, label: Label, now_ms: int
    ) -> Answer:
        """Keep `text` at `label`: `noted #{id}`, public and trusted. Once per (session, call)."""

        def act() -> Answer:
            cursor = self._conn.execute(
                "INSERT INTO notes (session, call, text, class, untrusted, created)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (session, call, text, label.class_.value, int(label.untrusted), rfc3339(now_ms)),
            )
            return Answer(True, f"noted #{cursor.lastrowid}", CLEAN)

        with self._operation("keep the note"):
            return self._once(session, call, arguments, now_ms, act)

    def forget(
        self, session: str, call: str, arguments: str, note_id: int, label: Label, now_ms: int
    ) -> Answer:
        """Delete note `note_id` if the caller, holding `label`, may see it (its class at most
        the caller's): `forgot #{id}`; else, and when there is no such note, the same
        `no note #{id}` (ok false), so that no id above the caller's class shows. Once."""
        seen = tuple(c.value for c in DataClass if c.at_most(label.class_))

        def act() -> Answer:
            cursor = self._conn.execute(
                f"DELETE FROM notes WHERE id = ? AND class IN ({', '.join('?' * len(seen))})",
                (note_id, *seen),
            )
            if cursor.rowcount == 0:
                return Answer(False, f"no note #{note_id}", CLEAN)
            return Answer(True, f"forgot #{note_id}", CLEAN)

        with self._operation("forget the note"):
            return self._once(session, call, arguments, now_ms, act)

    def recall(self, query: str) -> Answer:
        """Up to `RECALL_LIMIT` notes holding any word of `query`, best match first; a query
        with no word in it gives the most recent notes, newest first. The label is the join of
        every note in the store (`searched_label`), read in the same snapshot as the search."""
        expression = match_expression(query)
        with self._operation("search the notes"), self._snapshot():
            searched = self._searched_label()
            if expression is None:
                rows = self._conn.execute(
                    "SELECT id, text, class, untrusted FROM notes ORDER BY id DESC LIMIT ?",
                    (RECALL_LIMIT,),
                ).fetchall()
            else:
                rows = self._conn.execute(
                    "SELECT notes.id, notes.text, notes.class, notes.untrusted"
                    " FROM notes_fts JOIN notes ON notes.id = notes_fts.rowid"
                    " WHERE notes_fts MATCH ? ORDER BY notes_fts.rank, notes.id DESC LIMIT ?",
                    (expression, RECALL_LIMIT),
                ).fetchall()
        return render_recall([(row[0], row[1], _label(row[2], row[3])) for row in rows], searched)

    def searched_label(self) -> Label:
        """The join of every note's label: what a recall, whatever it returns, carries."""
        with self._operation("read the notes' label"):
            return self._searched_label()

    def _searched_label(self) -> Label:
        secret, private, untrusted = self._conn.execute(_STORE_LABEL).fetchone()
        return store_label(bool(secret), bool(private), bool(untrusted))

    def notes(self) -> list[StoredNote]:
        """Every note, oldest first (for tests and for the owner's inspection)."""
        with self._operation("list the notes"):
            rows = self._conn.execute(
                "SELECT id, session, call, text, class, untrusted, created FROM notes ORDER BY id"
            ).fetchall()
        return [StoredNote(r[0], r[1], r[2], r[3], _label(r[4], r[5]), r[6]) for r in rows]

    def browse(self, query: str | None, limit: int) -> tuple[list[StoredNote], int]:
        """For the owner (§12.2): the newest `limit` notes, or with `query` those that hold any
        of its words, best first; and how many notes there are in all."""
        expression = None if query is None else match_expression(query)
        columns = ", ".join(
            f"notes.{c}" for c in ("id", "session", "call", "text", "class", "untrusted", "created")
        )
        with self._operation("list the notes"), self._snapshot():
            (total,) = self._conn.execute("SELECT count(*) FROM notes").fetchone()
            if expression is None:
                rows = self._conn.execute(
                    f"SELECT {columns} FROM notes ORDER BY id DESC LIMIT ?", (limit,)
                ).fetchall()
            else:
                rows = self._conn.execute(
                    f"SELECT {columns} FROM notes_fts JOIN notes ON notes.id = notes_fts.rowid"
                    " WHERE notes_fts MATCH ? ORDER BY notes_fts.rank, notes.id DESC LIMIT ?",
                    (expression, limit),
                ).fetchall()
        notes = [StoredNote(r[0], r[1], r[2], r[3], _label(r[4], r[5]), r[6]) for r in rows]
        return notes, total


def _label(class_: str, untrusted: int) -> Label:
    return Label(DataClass(class_), bool(untrusted))


def _private_folder(folder: Path) -> None:
    with suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    info = os.stat(folder)
    if not stat.S_ISDIR(info.st_mode):
        raise StoreError(f"{folder} is not a folder")
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(folder, 0o700)  # mkdir's mode passes through the umask


def _private_file(path: Path) -> None:
    """Create the file 0600 before SQLite does (its -wal and -shm files copy that mode)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise StoreError(f"{path} is not a file")
        if stat.S_IMODE(info.st_mode) != 0o600:
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def _why(error: BaseException) -> str:
    if isinstance(error, OSError):
        where = f"{error.filename}: " if error.filename else ""
        return f"{where}{error.strerror or error}"
    text = str(error) or type(error).__name__
    return "it took too long (interrupted)" if text == "interrupted" else text
