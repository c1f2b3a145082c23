"""`bxctl.keyboard` on a real pseudo-terminal: what was typed before a question is thrown
away, in the terminal's queue and in the process."""

from __future__ import annotations

import os
import time
import tty
from collections.abc import Iterator

import pytest

from bxctl.keyboard import NOTHING_YET, Keyboard


@pytest.fixture
def pty() -> Iterator[tuple[int, Keyboard]]:
    master, slave = os.openpty()
    try:
        yield master, Keyboard(slave)
    finally:
        os.close(master)
        os.close(slave)


def settle() -> None:
    time.sleep(0.05)  # the pty's line discipline takes what was written a moment later


def test_a_line_typed_before_discard_is_never_read(pty: tuple[int, Keyboard]) -> None:
    master, keyboard = pty
    os.write(master, b"s\n")
    settle()
    keyboard.discard()
    assert keyboard.line(0.2) is NOTHING_YET
    os.write(master, b"k3v9\n")
    assert keyboard.line(2.0) == "k3v9"


def test_lines_read_together_are_given_one_at_a_time_and_dropped_by_discard(
    pty: tuple[int, Keyboard],
) -> None:
    master, keyboard = pty
    tty.setraw(keyboard.fd)  # no line discipline: one read may hold several lines
    os.write(master, b"first\ns\n")
    settle()
    assert keyboard.line(2.0) == "first"
    assert "8 bytes" not in repr(keyboard) and "2 bytes typed ahead" in repr(keyboard)
    keyboard.discard()
    assert keyboard.line(0.2) is NOTHING_YET


def test_end_of_input_is_none(pty: tuple[int, Keyboard]) -> None:
    master, keyboard = pty
    os.write(master, b"\x04")  # Ctrl-D on an empty line
    assert keyboard.line(2.0) is None
