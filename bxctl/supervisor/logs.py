"""Service logs (SPEC §13): `{home}/logs/<service>.log`, rotated by size to `.1` … `.3`.

The supervisor reads each child's output through a pipe and is the only writer of its log
(`RotatingLog`), so a log rotates while its service runs. `bxctl logs` reads them back:
`tail` the last lines, and `Follower` follows a file across rotations.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from bxcore.clock import now_ms, rfc3339

MAX_BYTES = 5 * 1024 * 1024
KEEP = 3
LONGEST_LINE = 64 * 1024  # a partial line longer than this is written without waiting


def rotated(path: Path, index: int) -> Path:
    return path.with_name(f"{path.name}.{index}")


def rotate(path: Path, keep: int = KEEP) -> None:
    """`path` -> `.1` -> `.2` … ; the oldest beyond `keep` is dropped."""
    with contextlib.suppress(FileNotFoundError):
        rotated(path, keep).unlink()
    for index in range(keep - 1, 0, -1):
        with contextlib.suppress(FileNotFoundError):
            os.replace(rotated(path, index), rotated(path, index + 1))
    with contextlib.suppress(FileNotFoundError):
        os.replace(path, rotated(path, 1))


def rotate_if_over(path: Path, max_bytes: int = MAX_BYTES, keep: int = KEEP) -> None:
    """Rotate `path` when it has reached `max_bytes` (for logs written by someone else)."""
    with contextlib.suppress(FileNotFoundError):
        if path.stat().st_size >= max_bytes:
            rotate(path, keep)


class RotatingLog:
    """One service's log: whole lines appended, rotated before it would pass `max_bytes`."""

    def __init__(self, path: Path, max_bytes: int = MAX_BYTES, keep: int = KEEP) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.keep = keep
        self._partial = b""
        self._fd = -1
        self._size = 0
        self._lost = 0  # lines that could not be written (a full disk), said once it has room

    def __repr__(self) -> str:
        return f"RotatingLog({self.path}, {self._size} bytes)"

    def write(self, data: bytes) -> None:
        """Append `data`; a line is written once it is whole, so rotation never splits one."""
        data = self._partial + data
        cut = data.rfind(b"\n") + 1
        if cut == 0 and len(data) > LONGEST_LINE:
            cut = len(data)
        self._partial = data[cut:]
        if cut:
            self._append(data[:cut])

    def note(self, text: str) -> None:
        """A line of the supervisor's own (started, exited, …), between the service's lines."""
        self.flush()
        self._append(f"{rfc3339(now_ms())} supervisor: {text}\n".encode())

    def flush(self) -> None:
        """Write what is left of a line that never ended (the process has exited)."""
        if self._partial:
            partial, self._partial = self._partial, b""
            self._append(partial + b"\n")

    def close(self) -> None:
        self.flush()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _append(self, data: bytes) -> None:
        """Append whole lines. A full disk or a removed folder must not stop the supervisor:
        lines that cannot be written are lost, and the next line that can be says how many."""
        if self._lost:
            said = f"{rfc3339(now_ms())} supervisor: {self._lost} lines of this log were lost: "
            data = said.encode() + b"its disk was full, or its folder could not be written\n" + data
        try:
            if self._fd < 0:
                self._open()
            if self._size > 0 and self._size + len(data) > self.max_bytes:
                os.close(self._fd)
                self._fd = -1
                rotate(self.path, self.keep)
                self._open()
            self._write_whole(data)
        except OSError:
            self._lost += max(1, data.count(b"\n") - (1 if self._lost else 0))
            return
        self._lost = 0
        self._size += len(data)

    def _write_whole(self, data: bytes) -> None:
        """All of `data`, or none of it: a part a full disk took is cut back off."""
        done = 0
        try:
            while done < len(data):
                done += os.write(self._fd, data[done:])
        except OSError:
            if done:
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, os.fstat(self._fd).st_size - done)
            raise

    def _open(self) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        self._fd = os.open(self.path, flags, 0o600)
        self._size = os.fstat(self._fd).st_size


def tail(path: Path, lines: int) -> list[str]:
    """The last `lines` lines of the log `path`, reaching into `.1` when `path` has fewer."""
    if lines <= 0:
        return []
    found = _last_lines(path, lines)
    if len(found) < lines:
        found = _last_lines(rotated(path, 1), lines - len(found)) + found
    return found


def _last_lines(path: Path, count: int) -> list[str]:
    try:
        with open(path, "rb") as file:
            end = file.seek(0, os.SEEK_END)
            block = 64 * 1024
            start = end
            data = b""
            while start > 0 and data.count(b"\n") <= count:
                start = max(0, start - block)
                file.seek(start)
                data = file.read(end - start)
    except (FileNotFoundError, IsADirectoryError):
        return []
    text = data.decode("utf-8", "replace")
    found = text.splitlines()
    if start > 0:
        found = found[1:]  # the first line may have been cut
    return found[-count:]


class Follower:
    """New lines of one log as they are written, across rotations (`tail -F`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = -1
        self._inode: tuple[int, int] | None = None
        self._partial = b""
        self._open(at_end=True)

    def __repr__(self) -> str:
        return f"Follower({self.path}, {'open' if self._fd >= 0 else 'waiting'})"

    def _open(self, *, at_end: bool) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return
        info = os.fstat(fd)
        self._fd = fd
        self._inode = (info.st_dev, info.st_ino)
        if at_end:
            os.lseek(fd, 0, os.SEEK_END)

    def read(self) -> list[str]:
        """The lines completed since the last call."""
        out = self._drain()
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            return out
        if self._fd < 0:
            self._open(at_end=False)  # the file appeared (or came back): from its start
            return out + self._drain()
        if (info.st_dev, info.st_ino) != self._inode:  # rotated: finish the old, go on
            out += self._drain()
            os.close(self._fd)
            self._fd = -1
            self._open(at_end=False)
            return out + self._drain()
        if info.st_size < os.lseek(self._fd, 0, os.SEEK_CUR):  # truncated
            os.lseek(self._fd, 0, os.SEEK_SET)
        return out

    def _drain(self) -> list[str]:
        if self._fd < 0:
            return []
        chunks = []
        while chunk := os.read(self._fd, 65536):
            chunks.append(chunk)
        data = self._partial + b"".join(chunks)
        cut = data.rfind(b"\n") + 1
        self._partial = data[cut:]
        return data[:cut].decode("utf-8", "replace").splitlines()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
