"""Seeing that a folder changed without reading it again (Linux inotify, through ctypes).

The grants folder is consulted at every decision (§5.1: a change is seen at the next one),
and listing and stat-ing it each time cost more than the decision itself. An inotify watch
tells the same for one `poll` of its descriptor (0.7 µs; a read that finds nothing raises and
costs 1.9). Where inotify is unavailable (`available` is False), the caller compares what it
sees with what it saw.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
from pathlib import Path

IN_MODIFY = 0x002
IN_ATTRIB = 0x004
IN_CLOSE_WRITE = 0x008
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_IGNORED = 0x8000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
MASK = (
    IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE
    | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF
)  # fmt: skip
LOST = IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _libc()


class FolderWatch:
    """`changed()` is True when anything in `folder` (or the folder itself) may have changed
    since the last call; the first call is always True."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._fd = -1
        self._watching = False
        self._poll = select.poll()
        if _LIBC is not None:
            self._fd = _LIBC.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if self._fd >= 0:
            self._poll.register(self._fd, select.POLLIN)

    @property
    def available(self) -> bool:
        """Whether inotify works here at all (else the caller must look for itself)."""
        return self._fd >= 0

    def __repr__(self) -> str:
        return f"FolderWatch({self.folder}, {'watching' if self._watching else 'not watching'})"

    def changed(self) -> bool:
        if not self._watching:
            self._watching = self._add()
            return True
        if not self._poll.poll(0):
            return False
        try:
            data = os.read(self._fd, 65536)
        except BlockingIOError:
            return False
        except OSError:
            self._watching = False
            return True
        if _lost(data):
            self._watching = False
        return True

    def _add(self) -> bool:
        if self._fd < 0 or _LIBC is None:
            return False
        while True:  # empty the queue of the old watch
            try:
                os.read(self._fd, 65536)
            except OSError:
                break
        added: int = _LIBC.inotify_add_watch(self._fd, os.fsencode(self.folder), MASK)
        return added >= 0


def _lost(data: bytes) -> bool:
    """True when an event says the watch itself is gone (folder removed or moved)."""
    offset = 0
    while offset + 16 <= len(data):
        mask = int.from_bytes(data[offset + 4 : offset + 8], "little")
        length = int.from_bytes(data[offset + 12 : offset + 16], "little")
        if mask & LOST:
            return True
        offset += 16 + length
    return False
