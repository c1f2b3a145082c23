"""Full disks (issue 28): how much room the disk holding a folder has left, and the one
sentence every writer of the box (loopd's histories, brokerd's ledger and labels, memoryd's
store, the logs, `bxctl status`) gives when a write fails for want of it, or when the disk is
so full that the next write will. `free_bytes` and `places` read the file system (statvfs,
stat); the rest is pure. It writes nothing.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

#: Less room than this is a full disk: a turn's next record may be a model's answer of up to
#: 4 MiB, a tool's result up to 64 KiB, so below a mebibyte a turn would stop half-way.
FULL_BELOW = 1024 * 1024

#: What the OS says when a write found no room: the disk (ENOSPC) or the user's quota (EDQUOT).
NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT})
SQLITE_FULL = 13  # sqlite3.SQLITE_FULL, "database or disk is full"


def lacks_room(error: BaseException) -> bool:
    """Whether `error` (or what it was raised from) is a write that found no room. SQLite says
    it with its own code (SQLITE_FULL), which `sqlite3` carries as `sqlite_errorcode`."""
    found: BaseException | None = error
    while found is not None:
        if isinstance(found, OSError) and found.errno in NO_ROOM:
            return True
        if getattr(found, "sqlite_errorcode", None) == SQLITE_FULL:
            return True
        found = found.__cause__ or found.__context__
    return False


def amount(size: int) -> str:
    """A number of bytes as the owner reads it: `0 bytes`, `512 bytes`, `12 KB`, `3.4 MB`."""
    if size < 1024:
        return f"{size} byte{'' if size == 1 else 's'}"
    if size < 1024**2:
        return f"{size // 1024} KB"
    value, unit = (size / 1024**2, "MB") if size < 1024**3 else (size / 1024**3, "GB")
    return f"{value:.0f} {unit}" if value >= 100 else f"{value:.1f} {unit}"


def full(folder: Path, free: int | None) -> str:
    """`the disk holding /h/sessions is full (12 KB free)`: the first part of every sentence
    about a full disk; without the free space when it cannot be read."""
    room = "" if free is None else f" ({amount(free)} free)"
    return f"the disk holding {folder} is full{room}"


def is_full(free: int | None) -> bool:
    """Whether a disk with `free` bytes left is full (unknown room is not)."""
    return free is not None and free < FULL_BELOW


def unwritable(folder: Path, error: BaseException) -> str:
    """Why a write in `folder` failed, in one line: the full-disk sentence (with the room left
    now) when it found no room, else the OS's own words."""
    if lacks_room(error):
        return full(folder, free_bytes(folder))
    if isinstance(error, OSError) and error.strerror:
        return f"cannot write in {folder}: {error.strerror}"
    return f"cannot write in {folder}: {error}"


def free_bytes(path: Path) -> int | None:
    """The bytes a process of the owner's may still write on the disk holding `path` (its
    nearest folder that exists); None when that cannot be read."""
    for place in (path, *path.parents):
        try:
            found = os.statvfs(place)
        except FileNotFoundError:
            continue
        except OSError:
            return None
        return found.f_bavail * found.f_frsize
    return None


@dataclass(frozen=True, slots=True)
class Disk:
    """One disk the box writes on: the first of the home's folders found on it (what the owner
    is told), what the box keeps there, and the room left."""

    folder: Path
    holds: tuple[str, ...]
    free: int | None

    @property
    def full(self) -> bool:
        return is_full(self.free)

    def sentence(self) -> str:
        """`the disk holding /h is full (12 KB free): the ledger and the logs cannot be written`"""
        return f"{full(self.folder, self.free)}: {joined(self.holds)} cannot be written"


def places(folders: Sequence[tuple[str, Path]]) -> list[Disk]:
    """The disks under `folders` (what each holds, and where), one each, in their order."""
    found: dict[int, tuple[Path, list[str]]] = {}
    for what, folder in folders:
        device = _device(folder)
        if device is None:
            continue
        place = found.setdefault(device, (folder, []))
        place[1].append(what)
    return [Disk(folder, tuple(held), free_bytes(folder)) for folder, held in found.values()]


def _device(folder: Path) -> int | None:
    for place in (folder, *folder.parents):
        try:
            return os.stat(place).st_dev
        except FileNotFoundError:
            continue
        except OSError:
            return None
    return None


def joined(parts: Iterable[str]) -> str:
    """`a`, `a and b`, `a, b and c`."""
    items = list(parts)
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"
