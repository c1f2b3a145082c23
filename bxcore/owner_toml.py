"""The owner's small TOML files, one a thing, in a folder of their own: grants (SPEC §5.1) and
jobs (§19). What every such file gets alike: the folder's file names, a read that never blocks
on a FIFO nor reads past a limit, and the table loaded with the same checks and the same
one-line reasons (size, UTF-8, TOML, unknown keys). What each key means is its parser's.
"""

from __future__ import annotations

import os
import stat
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class TableError(ValueError):
    """Why a file's bytes are no table of its kind: one line, for the owner."""


def names(folder: Path) -> list[str]:
    """The `*.toml` files of `folder` (none when it is missing), hidden ones left out."""
    try:
        return [n for n in os.listdir(folder) if n.endswith(".toml") and not n.startswith(".")]
    except FileNotFoundError:
        return []


def read(path: Path, limit: int) -> bytes:
    """At most one byte more than `limit`, so that a parser can say the file is too large;
    OSError when it is no regular file or cannot be read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(0, "not a regular file")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def load_table(data: bytes, limit: int, keys: Sequence[str]) -> dict[str, Any]:
    """The file's table, whose keys are all among `keys`; `TableError` otherwise. Pure."""
    if len(data) > limit:
        raise TableError(f"the file is larger than {limit} bytes")
    try:
        table = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise TableError(f"the file is not UTF-8 (byte {error.start})") from None
    except tomllib.TOMLDecodeError as error:
        raise TableError(f"not TOML: {error}") from None
    for key in table:
        if key not in keys:
            raise TableError(f"unknown key {key!r} (known: {', '.join(keys)})")
    return table
