"""Replacing a small file whole (temporary file, rename), or creating one that must not exist
yet (temporary file, link): a reader sees the old content or the new one, never a part.
`durable` also fsyncs the file before the rename and the folder after it, so the new content
survives a crash (state labels, the witness); a created file always is (job files). A write
that fails (a full disk) leaves the old file as it was and no temporary file behind."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomically(path: Path, data: bytes, *, mode: int = 0o600, durable: bool = True) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        try:
            os.fchmod(fd, mode)  # whatever the umask (and a temporary file left by a crash)
            _write_all(fd, data)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except BaseException:  # a full disk: the old file stands, and no part of the new is left
        temporary.unlink(missing_ok=True)
        raise
    if durable:
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


def create_atomically(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Write a new file whole and durably, never over an existing one: FileExistsError when
    `path` is taken. (A temporary file, fsynced, is linked into place; the folder fsynced.)"""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.new")
    temporary.unlink(missing_ok=True)  # left by a write of this pid that was cut short
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        try:
            os.fchmod(fd, mode)  # whatever the umask
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.link(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def _write_all(fd: int, data: bytes) -> None:
    """All of `data`: a write cut short (a disk nearly full) is carried on, never taken for the
    whole file; OSError when it cannot be."""
    done = 0
    while done < len(data):
        written = os.write(fd, data[done:] if done else data)
        if written <= 0:
            raise OSError(0, "the write wrote nothing")
        done += written
