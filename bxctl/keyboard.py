"""The owner's keyboard when `bxctl chat` runs on a terminal: lines read straight from the
terminal's descriptor, and what was typed ahead thrown away before a question is asked.

Nothing here reads through Python's buffered `sys.stdin`, so no line typed earlier can wait
in the process for the next prompt; `discard` also empties the terminal's own input queue.
"""

from __future__ import annotations

import contextlib
import os
import select
import termios

READ_SIZE = 65536


class NothingYet:
    """No line came within the wait."""

    def __repr__(self) -> str:
        return "NothingYet()"


NOTHING_YET = NothingYet()


class Keyboard:
    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._rest = b""  # bytes read after a line's end, kept for the next read

    def __repr__(self) -> str:
        return f"Keyboard(fd {self.fd}, {len(self._rest)} bytes typed ahead)"

    def discard(self) -> None:
        """Forget everything typed so far and not yet read as an answer: what this process
        holds, and the terminal's input queue (`tcflush`)."""
        self._rest = b""
        with contextlib.suppress(termios.error, OSError):
            if os.isatty(self.fd):
                termios.tcflush(self.fd, termios.TCIFLUSH)

    def line(self, wait_s: float | None = None) -> str | NothingYet | None:
        """The next line, without its newline; None at the end of input (Ctrl-D on an empty
        line); NOTHING_YET when `wait_s` passed first. Ctrl-D after some characters gives
        them, as the terminal does."""
        if b"\n" not in self._rest:
            ready, _, _ = select.select([self.fd], [], [], wait_s)
            if not ready:
                return NOTHING_YET
            data = os.read(self.fd, READ_SIZE)
            if not data and not self._rest:
                return None
            self._rest += data
        line, _, self._rest = self._rest.partition(b"\n")
        return line.decode("utf-8", "replace")
