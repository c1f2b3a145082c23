"""Session labels on disk (SPEC §6.2–6.3): `{home}/state/broker/<session>.json`.

brokerd is the only writer of this folder. A label only rises: `raise_` writes the join,
atomically (temporary file, fsync, rename, fsync of the folder). A session with no file is
private and trusted and reading it creates nothing, except a `sub-<parent>-<n>` child, which
inherits its parent's label the first time it is read.
"""

from __future__ import annotations

import json
from pathlib import Path

from bxcore.bounded import Bounded
from bxcore.errors import one_line
from bxcore.home import disk
from bxcore.home.atomic import write_atomically
from bxcore.ids import parent_of_sub, valid_session
from bxcore.labels import SESSION_DEFAULT, DataClass, Label
from bxcore.wire.messages import Error, ErrorCode, State, StateQuery

MAX_STATE_BYTES = 4096
CACHED = 4096  # sessions whose label is kept in memory


class StateError(Exception):
    """A state file cannot be read or written; the text names it and why."""


def encode_label(label: Label) -> bytes:
    return json.dumps({"class": label.class_.value, "untrusted": label.untrusted}).encode()


def decode_label(data: bytes) -> Label:
    """A state file's bytes, strictly: exactly `class` and `untrusted`; ValueError otherwise."""
    value = json.loads(data.decode("utf-8"))
    if not isinstance(value, dict) or set(value) != {"class", "untrusted"}:
        raise ValueError("expected exactly the keys class and untrusted")
    if value["class"] not in DataClass.__members__.values() or type(value["untrusted"]) is not bool:
        raise ValueError("class or untrusted has a wrong value")
    return Label(DataClass(value["class"]), value["untrusted"])


class StateStore:
    """The label files, and a cache of them: brokerd is their only writer, so what it read or
    wrote last is what is on disk. The cache is bounded; a label it dropped is read again."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._cache: Bounded[str, Label | None] = Bounded(CACHED, recency=True)  # None: no file

    def __repr__(self) -> str:
        return f"StateStore({self.folder})"

    def _file(self, session: str) -> Path:
        if not valid_session(session):
            raise StateError(f"{session!r} is not a session id")
        return self.folder / f"{session}.json"

    def read(self, session: str) -> Label:
        """The session's label; a missing `sub-*` file inherits from its parent (§6.3)."""
        on_disk = self._on_disk(session)
        if on_disk is not None:
            return on_disk
        parent = parent_of_sub(session)
        if parent is None:
            return SESSION_DEFAULT
        return self.raise_(session, SESSION_DEFAULT, self.read(parent))

    def peek(self, session: str) -> Label:
        """The label `read` would give, creating nothing: for the owner's questions, which
        must not fix a sub-agent's label before the sub-agent exists."""
        on_disk = self._on_disk(session)
        if on_disk is not None:
            return on_disk
        parent = parent_of_sub(session)
        return SESSION_DEFAULT if parent is None else SESSION_DEFAULT.join(self.peek(parent))

    def raise_(self, session: str, current: Label, label: Label) -> Label:
        """Raise `session` from `current` by `label` and return the result.

        What is on disk is joined in too, so a stale `current` can never lower the label. The
        file is written when the result differs from it, or when there is none."""
        on_disk = self._on_disk(session)
        joined = current.join(label) if on_disk is None else on_disk.join(current).join(label)
        if joined == on_disk:
            return joined
        path = self._file(session)
        self._cache.pop(session)  # if the write fails, what is on disk is unknown
        try:
            self.folder.parent.mkdir(parents=True, exist_ok=True, mode=0o700)  # {home}/state
            self.folder.mkdir(exist_ok=True, mode=0o700)
            write_atomically(path, encode_label(joined))
        except OSError as error:
            raise StateError(f"cannot write {path}: {_why(path, error)}") from None
        self._cache.put(session, joined)
        return joined

    def _on_disk(self, session: str) -> Label | None:
        if session in self._cache:
            return self._cache[session]
        label = self._read_file(self._file(session))
        self._cache.put(session, label)
        return label

    def _read_file(self, path: Path) -> Label | None:
        try:
            with open(path, "rb") as file:
                data = file.read(MAX_STATE_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as error:
            raise StateError(f"cannot read {path}: {error.strerror}") from None
        try:
            if len(data) > MAX_STATE_BYTES:
                raise ValueError(f"larger than {MAX_STATE_BYTES} bytes")
            return decode_label(data)
        except (ValueError, RecursionError) as error:
            raise StateError(f"{path} is damaged: {one_line(error)}") from None


def answer_state(labels: StateStore, message: StateQuery, *, peek: bool = False) -> State | Error:
    """The session's label; `peek` (the owner asking) never creates a sub-agent's file."""
    look = labels.peek if peek else labels.read
    try:
        return State(message.id, message.session, look(message.session))
    except StateError as error:
        return Error(message.id, ErrorCode.UNAVAILABLE, str(error))


def _why(path: Path, error: OSError) -> str:
    """The OS's words, or on a full disk which disk and the room left on it (issue 28)."""
    if disk.lacks_room(error):
        return disk.full(path.parent, disk.free_bytes(path.parent))
    return str(error.strerror)
