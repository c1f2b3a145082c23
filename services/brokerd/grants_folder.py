"""The grants folder (SPEC §5.1): every `*.toml` file in `{home}/grants/`, read again whenever
one is added, removed or changed, so the next decision sees the change. Parsing is the core's
(`services.brokerd.core.grants.parse_grant`).
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Any

from bxcore import owner_toml
from services.brokerd.core.grant_check import said
from services.brokerd.core.grants import (
    MAX_GRANT_BYTES,
    Grant,
    GrantSet,
    InvalidGrant,
    parse_grant,
)
from services.brokerd.watch import FolderWatch

log = logging.getLogger(__name__)


def read_folder(folder: Path) -> GrantSet:
    """Every `*.toml` file in `folder`, parsed; a missing folder is no grants."""
    valid: list[Grant] = []
    invalid: list[InvalidGrant] = []
    for name in sorted(owner_toml.names(folder)):
        grant_id = name[: -len(".toml")]
        try:
            parsed = parse_grant(grant_id, owner_toml.read(folder / name, MAX_GRANT_BYTES))
        except OSError as error:
            parsed = InvalidGrant(grant_id, _NOTHING, f"cannot read the file: {error.strerror}")
        if isinstance(parsed, Grant):
            valid.append(parsed)
        else:
            invalid.append(parsed)
    return GrantSet(tuple(valid), tuple(invalid))


_NOTHING = hashlib.sha256(b"").hexdigest()


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
                log.warning("%s", said(grant))

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
