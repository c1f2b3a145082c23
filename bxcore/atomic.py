"""Replacing a small file whole (temporary file, rename): a reader sees the old content or the
new one, never a part. `durable` also fsyncs the file before the rename and the folder after
it, so the new content survives a crash (state labels, the witness)."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomically(path: Path, data: bytes, *, mode: int = 0o600, durable: bool = True) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        os.write(fd, data)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
    if durable:
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
