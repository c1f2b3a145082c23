"""Grant files (SPEC §5.1): one TOML file a grant in `{home}/grants/`, parsed strictly.

`parse_grant` is pure: a file's id and bytes in, a `Grant` or an `InvalidGrant` (with why, in
one line) out. An invalid grant never matches anything. `GrantsFolder` is the thin shell that
reads the folder again whenever its files change, so the next decision sees the change.
"""

from __future__ import annotations

import enum
import hashlib
import logging
import os
import re
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bxcore.labels import DataClass
from bxcore.tools import BROKERED, Match
from services.brokerd.args import inside, valid_host_pattern, valid_path
from services.brokerd.watch import FolderWatch

log = logging.getLogger(__name__)

MAX_GRANT_BYTES = 64 * 1024
_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
_KEYS = ("tool", "mode", "path", "host", "class", "untrusted", "note")
#: Every sandbox has a /proc and a /dev of its own (brokerd keeps its own things there).
SANDBOX_OWN = ("/proc", "/dev")


class Mode(enum.StrEnum):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


@dataclass(frozen=True, slots=True)
class Grant:
    id: str
    tool: str
    mode: Mode
    path: str | None
    host: str | None
    class_: DataClass
    untrusted: bool
    note: str
    sha256: str

    def __repr__(self) -> str:
        scope = self.path or self.host or "*"
        return f"Grant({self.id}: {self.mode} {self.tool} {scope}, {self.class_})"


@dataclass(frozen=True, slots=True)
class InvalidGrant:
    id: str
    sha256: str
    problem: str


@dataclass(frozen=True, slots=True)
class GrantSet:
    valid: tuple[Grant, ...] = ()
    invalid: tuple[InvalidGrant, ...] = ()


def valid_id(grant_id: str) -> bool:
    return _ID.fullmatch(grant_id) is not None


def parse_grant(grant_id: str, data: bytes) -> Grant | InvalidGrant:
    """One grant file's bytes, strictly: anything wrong makes the whole grant invalid."""
    sha256 = hashlib.sha256(data).hexdigest()
    try:
        return _parse(grant_id, data, sha256)
    except _Invalid as problem:
        return InvalidGrant(grant_id, sha256, str(problem))


class _Invalid(Exception):
    pass


def _parse(grant_id: str, data: bytes, sha256: str) -> Grant:
    if not valid_id(grant_id):
        raise _Invalid(
            f"the file name {grant_id!r} is not a grant id (a-z 0-9 -, at most 64, "
            "not starting with -)"
        )
    if len(data) > MAX_GRANT_BYTES:
        raise _Invalid(f"the file is larger than {MAX_GRANT_BYTES} bytes")
    try:
        table = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise _Invalid(f"the file is not UTF-8 (byte {error.start})") from None
    except tomllib.TOMLDecodeError as error:
        raise _Invalid(f"not TOML: {error}") from None
    for key in table:
        if key not in _KEYS:
            raise _Invalid(f"unknown key {key!r} (known: {', '.join(_KEYS)})")
    tool = _text(table, "tool", required=True)
    spec = BROKERED.get(tool)
    if spec is None:
        raise _Invalid(f"tool: {tool!r} is not one of {', '.join(BROKERED)}")
    mode_text = _text(table, "mode", required=True)
    if mode_text not in Mode.__members__.values():
        raise _Invalid(f'mode: expected "allow", "ask" or "deny", got {mode_text!r}')
    path = _text(table, "path")
    host = _text(table, "host")
    wanted = spec.grant_key
    for key, value in (("path", path), ("host", host)):
        if value is not None and key != wanted:
            raise _Invalid(f"{key}: a {tool} grant takes no {key}")
    if wanted == "path":
        if path is None:
            raise _Invalid(f"path: missing; a {tool} grant names the folder or file it covers")
        if not valid_path(path):
            raise _Invalid(
                f"path: {path!r} is not a valid path (absolute, no trailing /, no . or ..)"
            )
        for own in SANDBOX_OWN:
            if inside(own, path):
                raise _Invalid(f"path: {own} is every sandbox's own; a grant cannot name it")
    if wanted == "host":
        if host is None:
            raise _Invalid(f"host: missing; a {tool} grant names a host like en.wikipedia.org")
        if not valid_host_pattern(host):
            raise _Invalid(f"host: {host!r} is not a host name or a *.base pattern")
    class_text = _text(table, "class") or DataClass.PRIVATE.value
    if class_text not in DataClass.__members__.values():
        raise _Invalid(f'class: expected "public", "private" or "secret", got {class_text!r}')
    untrusted = table.get("untrusted", spec.match is Match.HOST)
    if type(untrusted) is not bool:
        raise _Invalid(f"untrusted: expected true or false, got {_shown(untrusted)}")
    note = _text(table, "note") or ""
    return Grant(
        grant_id, tool, Mode(mode_text), path, host, DataClass(class_text), untrusted, note, sha256
    )


def _text(table: dict[str, Any], key: str, *, required: bool = False) -> Any:
    value = table.get(key)
    if value is None:
        if required:
            raise _Invalid(f"{key}: missing")
        return None
    if type(value) is not str:
        raise _Invalid(f"{key}: expected a string, got {_shown(value)}")
    return value


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "…"


def read_folder(folder: Path) -> GrantSet:
    """Every `*.toml` file in `folder`, parsed; a missing folder is no grants."""
    valid: list[Grant] = []
    invalid: list[InvalidGrant] = []
    for name in sorted(_names(folder)):
        grant_id = name[: -len(".toml")]
        try:
            parsed = parse_grant(grant_id, _read(folder / name))
        except OSError as error:
            parsed = InvalidGrant(grant_id, _NOTHING, f"cannot read the file: {error.strerror}")
        if isinstance(parsed, Grant):
            valid.append(parsed)
        else:
            invalid.append(parsed)
    return GrantSet(tuple(valid), tuple(invalid))


_NOTHING = hashlib.sha256(b"").hexdigest()


def _names(folder: Path) -> list[str]:
    try:
        return [n for n in os.listdir(folder) if n.endswith(".toml") and not n.startswith(".")]
    except FileNotFoundError:
        return []


def _read(path: Path) -> bytes:
    """At most one byte more than a grant may hold; never blocks on a FIFO."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(0, "not a regular file")
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_GRANT_BYTES:
            chunk = os.read(fd, MAX_GRANT_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


class GrantsFolder:
    """The grants folder, read again whenever a file in it is added, removed or changed.

    inotify says when to look (`FolderWatch`); without it, the files' names, inodes, sizes
    and times are compared with what was read at every call."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._watch = FolderWatch(folder)
        self._signature: tuple[Any, ...] | None = None
        self._grants = GrantSet()
        self._told: set[tuple[str, str]] = set()

    def __repr__(self) -> str:
        return (
            f"GrantsFolder({self.folder}: {len(self._grants.valid)} valid, "
            f"{len(self._grants.invalid)} invalid, {self._watch!r})"
        )

    def current(self) -> GrantSet:
        if self._watch.available:
            if self._watch.changed():
                self._read()
            return self._grants
        signature = self._signature_now()
        if signature != self._signature:
            self._read()
            self._signature = signature
        return self._grants

    def _read(self) -> None:
        self._grants = read_folder(self.folder)
        for grant in self._grants.invalid:  # each version of an invalid grant, said once
            if (grant.id, grant.sha256) not in self._told:
                self._told.add((grant.id, grant.sha256))
                log.warning("grant %s is invalid and never matches: %s", grant.id, grant.problem)

    def _signature_now(self) -> tuple[Any, ...]:
        try:
            entries = os.scandir(self.folder)
        except FileNotFoundError:
            return ()
        with entries:
            marks: list[tuple[Any, ...]] = []
            for entry in entries:
                if not entry.name.endswith(".toml"):
                    continue
                try:
                    info = entry.stat()
                except OSError:
                    marks.append((entry.name, None))
                    continue
                marks.append(
                    (entry.name, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
                )
        return tuple(sorted(marks, key=lambda mark: mark[0]))
