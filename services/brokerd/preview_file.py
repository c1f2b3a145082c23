"""The `write_file` preview's I/O (SPEC §12.2): the file a call would replace, read as it is
when its approval is asked, for `core.preview.write_preview` to compare.

The path is walked from `/` one component at a time, never through a symbolic link (as the
sandbox binds a grant's path: `sandbox.open_granted`), and only a regular file is read, at
most `MAX_OLD + 1` bytes: a link, a FIFO, a device, a folder or a file brokerd cannot read has
no preview. A missing file is a new one. Blocking: call `preview` (a worker thread), never
`preview_of` on the event loop. It never writes.
"""

from __future__ import annotations

import os
import stat

import anyio

from services.brokerd.core.args import ToolArgs
from services.brokerd.core.preview import MAX_OLD, write_preview

_FOLDER = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_LOOK = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class Unreadable(Exception):
    """The file cannot be read for a preview (a link, not a regular file, no permission)."""


async def preview(args: ToolArgs) -> str | None:
    """`preview_of(args)`, in a worker thread."""
    return await anyio.to_thread.run_sync(preview_of, args)


def preview_of(args: ToolArgs) -> str | None:
    """The preview of a `write_file` call; None when its file cannot be read safely."""
    path, content = args.path, args.get("content")
    if path is None or not isinstance(content, str):
        return None
    try:
        old = read_old(path)
    except Unreadable:
        return None
    return write_preview(path, old, content)


def read_old(path: str) -> bytes | None:
    """At most `MAX_OLD + 1` bytes of the regular file at `path` (absolute), reached without
    following a link; None when it (or a folder on its way) does not exist; `Unreadable`
    otherwise."""
    parts = [part for part in path.split("/") if part]
    if not path.startswith("/") or not parts:
        raise Unreadable(path)
    folder = os.open("/", _FOLDER)
    try:
        for part in parts[:-1]:
            found = _open(part, _FOLDER, folder)
            if found is None:
                return None
            os.close(folder)
            folder = found
            if not stat.S_ISDIR(os.fstat(folder).st_mode):
                raise Unreadable(path)
        return _read_regular(parts[-1], folder)
    finally:
        os.close(folder)


def _read_regular(name: str, folder: int) -> bytes | None:
    """Looked at first without opening it for reading (opening a device may do something),
    then opened and checked to be the same regular file."""
    look = _open(name, _LOOK, folder)
    if look is None:
        return None
    try:
        seen = os.fstat(look)
    finally:
        os.close(look)
    if not stat.S_ISREG(seen.st_mode):
        raise Unreadable(name)
    fd = _open(name, _READ, folder)
    if fd is None:
        return None
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (
            seen.st_dev,
            seen.st_ino,
        ):
            raise Unreadable(name)  # swapped between the look and the open
        chunks: list[bytes] = []
        left = MAX_OLD + 1
        while left > 0:
            chunk = os.read(fd, min(left, 256 * 1024))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError as error:
        raise Unreadable(name) from error
    finally:
        os.close(fd)


def _open(name: str, flags: int, folder: int) -> int | None:
    try:
        return os.open(name, flags, dir_fd=folder)
    except FileNotFoundError:
        return None
    except OSError as error:  # a link (ELOOP, ENOTDIR), no permission, …
        raise Unreadable(name) from error
