"""Writing and removing grant files (SPEC §5.1): the one code behind `bxctl grant add` / `rm`
and the console's **Add grant** / **Remove** (brokerd's `grant_add` / `grant_remove`).

A grant is written from its fields as TOML, parsed back by the core's `parse_grant` (so what is
written is exactly what brokerd will read), checked against the owner's pins (`grant_check`: a
`[match]` key its tool does not have is refused), and linked into place without ever
overwriting an existing grant. Every refusal is a `GrantRefused` with one line the owner reads.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bxcore.config.written import toml_value
from bxcore.mcp_tools import Pins
from services.brokerd.core.grant_check import fit
from services.brokerd.core.grants import Grant, InvalidGrant, MatchValue, parse_grant, valid_id

FOLDER_MODE = 0o700
FILE_MODE = 0o600
_NUMBER = re.compile(r"-?(0|[1-9]\d{0,15})(\.\d{1,16})?")


class GrantRefused(Exception):
    """Nothing was written or removed; `str()` says why, in one line."""


@dataclass(frozen=True)
class GrantFields:
    """What the owner fills in (§5.1); None: the key is left out of the file."""

    tool: str
    mode: str = "allow"
    path: str | None = None
    host: str | None = None
    class_: str = "private"
    untrusted: bool | None = None
    note: str = ""
    kind: str | None = None  # MCP tools only (§18.5): source, sink or both
    match: tuple[tuple[str, MatchValue], ...] = ()  # MCP tools only: `[match]`, in order given
    write: bool | None = None  # shell only: False binds its folder read-only (issue 15)


def match_value(text: str) -> MatchValue:
    """One `--match NAME=VALUE` value as the owner typed it: a JSON number when it reads as
    one (`3`, `-1.5`), else the text itself (an exact string, or a `glob:` pattern; the string
    "3" is matched by `glob:3`)."""
    if _NUMBER.fullmatch(text):
        return float(text) if "." in text else int(text)
    return text


def parse_match(given: list[str]) -> tuple[tuple[str, MatchValue], ...]:
    """`NAME=VALUE` options (repeatable; a name given twice allows either value)."""
    out = []
    for item in given:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise GrantRefused(f"--match {item!r}: expected NAME=VALUE, like branch=main")
        out.append((name, match_value(value)))
    return tuple(out)


def match_items(grant: Grant) -> tuple[str, ...]:
    """A grant's `[match]` as `NAME=VALUE` items, one a value, as `parse_match` reads them."""
    return tuple(f"{name}={value}" for name, values in grant.match for value in values)


def grant_text(fields: GrantFields, written_by: str) -> str:
    """The grant file's text, with a first comment naming who wrote it."""
    lines = [f"tool = {toml_value(fields.tool)}", f"mode = {toml_value(fields.mode)}"]
    if fields.path is not None:
        lines.append(f"path = {toml_value(fields.path)}")
    if fields.host is not None:
        lines.append(f"host = {toml_value(fields.host)}")
    lines.append(f"class = {toml_value(fields.class_)}")
    if fields.untrusted is not None:
        lines.append(f"untrusted = {toml_value(fields.untrusted)}")
    if fields.write is not None:
        lines.append(f"write = {toml_value(fields.write)}")
    if fields.kind is not None:
        lines.append(f"kind = {toml_value(fields.kind)}")
    if fields.note:
        lines.append(f"note = {toml_value(fields.note)}")
    if fields.match:
        lines += ["", "[match]"]
        grouped: dict[str, list[MatchValue]] = {}
        for name, value in fields.match:
            grouped.setdefault(name, []).append(value)
        for name, values in grouped.items():
            shown = toml_value(values[0] if len(values) == 1 else values)
            lines.append(f"{toml_value(name)} = {shown}")
    return f"# Written by {written_by}.\n" + "\n".join(lines) + "\n"


def grant_file_mode(folder_mode: int) -> int:
    """A new grant file is the owner's alone (0600), unless the grants folder lets its group
    read (deploy/: `grants/` is 2750 with brokerd's group): then that group reads it (0640).
    Never readable by every user, whatever the umask."""
    return 0o640 if folder_mode & stat.S_IRGRP else FILE_MODE


def check_grant(
    grant_id: str, fields: GrantFields, written_by: str, pins: Mapping[str, Pins]
) -> tuple[Grant, str]:
    """The grant as brokerd will read it, and its file's text; GrantRefused when invalid,
    also when a `[match]` key does not fit its tool's pinned schema in `pins` (a tool not
    pinned yet is not refused for that: it is checked once it is)."""
    if not valid_id(grant_id):
        raise GrantRefused(
            f"{grant_id!r} is not a grant id: use a-z, 0-9 and -, at most 64, not starting with -"
        )
    text = grant_text(fields, written_by)
    parsed = parse_grant(grant_id, text.encode())
    if isinstance(parsed, InvalidGrant):
        raise GrantRefused(f"not added: {parsed.problem}")
    problem = fit(parsed, pins).problem
    if problem is not None:
        raise GrantRefused(f"not added: {problem}")
    return parsed, text


def add_grant(
    folder: Path, grant_id: str, fields: GrantFields, written_by: str, pins: Mapping[str, Pins]
) -> Grant:
    """Write `{folder}/{grant_id}.toml`, durably, never over an existing grant; `pins`: the
    owner's, that its `[match]` is checked against."""
    grant, text = check_grant(grant_id, fields, written_by, pins)
    try:
        if not folder.exists():
            folder.mkdir(mode=FOLDER_MODE, parents=True)
        target = folder / f"{grant_id}.toml"
        temporary = folder / f".{grant_id}.toml.new"
        temporary.unlink(missing_ok=True)  # left by an add that was cut short
        mode = grant_file_mode(os.stat(folder).st_mode)
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            os.fchmod(file.fileno(), mode)
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        try:
            os.link(temporary, target)  # fails if the id is taken: never overwrite
        except FileExistsError:
            raise GrantRefused(
                f"a grant {grant_id!r} exists already ({target}); remove it first"
            ) from None
        finally:
            temporary.unlink()
        _sync(folder)
    except OSError as error:
        raise GrantRefused(f"cannot write the grant in {folder}: {error.strerror}") from None
    return grant


def remove_grant(folder: Path, grant_id: str) -> None:
    """Remove `{folder}/{grant_id}.toml`; brokerd stops using it at its next decision."""
    if not valid_id(grant_id):
        raise GrantRefused(f"{grant_id!r} is not a grant id")
    try:
        (folder / f"{grant_id}.toml").unlink()
        _sync(folder)
    except FileNotFoundError:
        raise GrantRefused(f"no grant {grant_id!r} in {folder}") from None
    except OSError as error:
        raise GrantRefused(f"cannot remove the grant {grant_id!r}: {error.strerror}") from None


def _sync(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
