"""Appending whole records to a history file (SPEC §10.6, issue 28): a write cut short is
carried on; one that fails, or whose fsync fails, is cut back to where the file ended, so that
no record is ever glued onto a part of another (which a later load would pass over, losing
both). Every failure is `HistoryUnwritable`, here, once, with the one line the owner reads.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from pathlib import Path

from bxcore.home import disk

log = logging.getLogger("loopd")


class HistoryUnwritable(Exception):
    """A record could not be written (a full disk, a failing one); the file is as it was
    before the write. `why` is one line naming the folder (and, on a full disk, the room
    left); `room` says that the write found no room, which freeing space mends."""

    def __init__(self, why: str, *, room: bool) -> None:
        super().__init__(why)
        self.why = why
        self.room = room


def append_whole(path: Path, size: int, data: bytes, write: Callable[[int, bytes], int]) -> int:
    """Append `data` (whole lines) to `path`, which holds `size` bytes of whole lines, and
    fsync it; the file's new length. Raises `HistoryUnwritable` with the file cut back to
    `size`: what a failed write left past it (also an earlier one's, whose cut failed too) is
    never written after. `write` is `os.write`, or a test's."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as error:
        raise _unwritable(path, error) from error
    try:
        start = os.fstat(fd).st_size
        if start > size:  # what a failed write left, that could not be cut then
            os.ftruncate(fd, size)
            start = size
        done = 0
        while done < len(data):
            written = write(fd, data[done:] if done else data)
            if written <= 0:
                raise OSError(0, "the write wrote nothing")
            done += written
        os.fsync(fd)
    except OSError as error:
        with contextlib.suppress(OSError):  # if this fails too, the next append cuts it
            os.ftruncate(fd, start)
            os.fsync(fd)
        raise _unwritable(path, error) from error
    finally:
        os.close(fd)
    return start + len(data)


def _unwritable(path: Path, error: OSError) -> HistoryUnwritable:
    why = disk.unwritable(path.parent, error)
    log.error("%s: a history record was not written: %s", path.name, why)
    return HistoryUnwritable(why, room=disk.lacks_room(error))
