"""Grant files (SPEC §5.1): one TOML file a grant in `{home}/grants/`, parsed strictly.

`parse_grant` is pure: a file's id and bytes in, a `Grant` or an `InvalidGrant` (with why, in
one line) out. An invalid grant never matches anything. Reading the folder is the shell's
(`services.brokerd.grants_folder`).
"""

from __future__ import annotations

import enum
import hashlib
import re
import tomllib
from dataclasses import dataclass
from typing import Any

from bxcore.labels import DataClass
from bxcore.tools import BROKERED, Match
from services.brokerd.core.args import inside, valid_host_pattern, valid_path

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
