"""The exclusive lock each daemon takes before it binds (SPEC §2.3).

A second bind on an `ipc://` path silently steals it from the first process, so a daemon
holds `{home}/run/<service>.lock` (an `flock`) for its whole life and refuses to start when
another process holds it. The kernel drops the lock when the process dies, however it dies.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class AlreadyRunning(Exception):
    """Another process holds the lock; the text says which, in one line."""


class RunLock:
    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __repr__(self) -> str:
        return f"RunLock({self.path}, {'held' if self._fd >= 0 else 'released'})"


def take(path: Path, service: str) -> RunLock:
    """Take the lock at `path` for `service`, or raise AlreadyRunning."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
        os.close(fd)
        raise AlreadyRunning(
            f"{service} is already running for this home (pid {holder}; lock {path})"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return RunLock(path, fd)


def holder(path: Path) -> int | None:
    """The pid written in the lock at `path` when that process is alive (it runs, or ran and
    its pid is not reused yet: good enough to decide whether to wait for it); else None.
    Never takes the lock, so a daemon starting at the same moment is not refused."""
    try:
        pid = int(path.read_text(encoding="ascii").strip() or "0")
    except (OSError, ValueError):
        return None
    if pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, another user's
    return pid
