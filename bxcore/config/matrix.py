"""The `[matrix]` table of `config.toml` (SPEC §21.1): the owner's phone channel, parsed strictly.

Pure: no I/O. No table, no channel (`Config.matrix` is None). A table names the homeserver, the
box's own account, the owners and the room; the access token is never in the file, only the
name of the environment variable that holds it. Every problem is one line naming the key; the
keys are a table (`MATRIX_KEYS`) like the sections', so docs/configuration.md lists them too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from bxcore.config.keys import BOOLEAN, URL, Check, Key, Kind, show, table_values

REQUIRED = None  # the default of a key the table must give
MAX_OWNERS = 64
# A user id `@localpart:server` (the spec's historical grammar, as servers still accept it),
# and a room id `!opaque:server`, or `!opaque` alone (room version 12 drops the server); the
# server part is a host name or address with a port.
_SERVER = r"[A-Za-z0-9.:\[\]-]{1,255}"
_USER = re.compile(rf"@[!-9;-~]{{1,255}}:{_SERVER}")
_ROOM = re.compile(rf"![!-9;-~]{{1,255}}(?::{_SERVER})?")
_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def valid_user(value: str) -> bool:
    return len(value) <= 255 and _USER.fullmatch(value) is not None


def _user(value: str) -> str | None:
    return (
        None
        if valid_user(value)
        else f"expected a user id such as @box:example.org, got {show(value)}"
    )


def _room(value: str) -> str | None:
    if len(value) <= 255 and _ROOM.fullmatch(value) is not None:
        return None
    return f"expected a room id such as !abc:example.org, got {show(value)}"


def _env(value: str) -> str | None:
    return (
        None
        if _ENV.fullmatch(value)
        else f"expected an environment variable name, got {show(value)}"
    )


def _owners(value: list[Any]) -> str | None:
    if not value:
        return "expected at least one owner"
    if len(value) > MAX_OWNERS:
        return f"more than {MAX_OWNERS} owners"
    for owner in value:
        if not isinstance(owner, str) or not valid_user(owner):
            return f"{show(owner)}: expected a user id such as @me:example.org"
    return None


MATRIX_KEYS: tuple[Key, ...] = (
    Key("matrix", "homeserver", Kind.STRING, REQUIRED, URL,
        "The homeserver's client-server API base URL, e.g. https://matrix.example.org. "
        "Required."),
    Key("matrix", "user", Kind.STRING, REQUIRED,
        Check("a user id, @name:server", _user),
        "The box's own Matrix account (the access token must be this account's). Required."),
    Key("matrix", "token_env", Kind.STRING, "BX_MATRIX_TOKEN",
        Check("an environment variable name", _env),
        "The environment variable gatewayd reads the box's access token from; the token "
        "itself never goes in this file."),
    Key("matrix", "owners", Kind.LIST, REQUIRED,
        Check("user ids, @name:server, one or more", _owners),
        "The owners' user ids: only their messages and reactions are ever acted on. Required."),
    Key("matrix", "room", Kind.STRING, REQUIRED,
        Check("a room id, !opaque:server", _room),
        "The room the box listens in (it joins when an owner invites it). Required."),
    Key("matrix", "encrypted", Kind.BOOLEAN, True, BOOLEAN,
        "Act only on messages and reactions that were end-to-end encrypted."),
)  # fmt: skip
_BY_NAME = {key.name: key for key in MATRIX_KEYS}


@dataclass(frozen=True)
class MatrixConfig:
    """The `[matrix]` table (§21.1)."""

    homeserver: str
    user: str
    owners: tuple[str, ...]
    room: str
    token_env: str = "BX_MATRIX_TOKEN"
    encrypted: bool = True


class TableError(Exception):
    """The table's problem, without the file's name (the caller adds it)."""


def parse_matrix(body: Any, check: Any) -> MatrixConfig:
    """The `[matrix]` table. `check(key, value, where)` is `bxcore.config.file`'s typed key check
    (raising its `ConfigError`); problems of the table as a whole raise `TableError`."""
    if not isinstance(body, dict):
        raise TableError(f"[matrix]: expected a table, got {show(body)}")
    values = table_values(body, _BY_NAME.get, "[matrix]", check, TableError)
    for key in MATRIX_KEYS:
        if key.default is REQUIRED and key.attr not in values:
            raise TableError(f"[matrix] {key.name}: missing (a [matrix] table names it)")
    if values["user"] in values["owners"]:
        raise TableError("[matrix] owners: the box's own account cannot be an owner")
    values["owners"] = tuple(dict.fromkeys(values["owners"]))
    return MatrixConfig(**values)


EXAMPLE = """\
# [matrix]
# homeserver = "https://matrix.example.org"
# user = "@box:example.org"
# token_env = "BX_MATRIX_TOKEN"
# owners = ["@me:example.org"]
# room = "!abc:example.org"
# encrypted = true"""
