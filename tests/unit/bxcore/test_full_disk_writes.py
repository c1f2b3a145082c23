"""Small files on a full disk (issue 28): a file replaced whole stays as it was when the new one
cannot be written, and leaves no part of it behind; brokerd's report is withdrawn rather than
left stale, and written again once it can be; a service log says how many lines it lost."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from bxcore.home import atomic, report
from bxcore.home.layout import Home
from bxctl.supervisor import logs

Write = Callable[[int, bytes], int]


def full_disk(room: int) -> Write:
    """`os.write` on a disk with `room` bytes left: what fits, then ENOSPC."""
    left = [room]
    real = os.write  # before a test puts this function in its place

    def write(fd: int, data: bytes) -> int:
        if left[0] == 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written = real(fd, data[: left[0]])
        left[0] -= written
        return written

    return write


@pytest.mark.parametrize("room", [0, 3])
def test_a_file_replaced_on_a_full_disk_stays_as_it_was_and_no_part_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, room: int
) -> None:
    path = tmp_path / "head.json"
    atomic.write_atomically(path, b'{"seq":1}')
    monkeypatch.setattr(atomic.os, "write", full_disk(room))
    with pytest.raises(OSError, match="No space left"):
        atomic.write_atomically(path, b'{"seq":2,"longer":true}')
    with pytest.raises(OSError, match="No space left"):
        atomic.create_atomically(tmp_path / "new.toml", b"a = 1\n")
    assert path.read_bytes() == b'{"seq":1}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["head.json"]


def test_a_write_cut_short_is_carried_on_to_the_whole_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.write
    monkeypatch.setattr(atomic.os, "write", lambda fd, data: real(fd, data[:2]))
    atomic.write_atomically(tmp_path / "f", b"0123456789")
    assert (tmp_path / "f").read_bytes() == b"0123456789"


def test_a_report_that_cannot_be_written_is_withdrawn_then_written_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = Home(tmp_path)
    home.run.mkdir()
    said = report.Report(home)
    said.set("ledger", {"state": "ok"})
    assert report.read(home) == {"ledger": {"state": "ok"}}
    real = atomic.os.write
    monkeypatch.setattr(atomic.os, "write", full_disk(0))
    said.set("ledger", {"state": "failed"})
    assert report.read(home) == {}  # not the old "ok"
    assert "unwritten" in repr(said)
    said.retry()
    assert report.read(home) == {}
    monkeypatch.setattr(atomic.os, "write", real)
    said.retry()
    assert report.read(home) == {"ledger": {"state": "failed"}}


def test_a_log_says_how_many_lines_a_full_disk_lost_once_it_has_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "loopd.log"
    log = logs.RotatingLog(path)
    log.write(b"one\n")
    real = os.write
    monkeypatch.setattr(logs.os, "write", full_disk(2))  # half a line fits, then nothing
    log.write(b"two\nthree\n")
    log.write(b"four\n")
    assert path.read_bytes() == b"one\n"  # no part of a line is left
    monkeypatch.setattr(logs.os, "write", real)
    log.write(b"five\n")
    log.close()
    lines = path.read_bytes().decode().splitlines()
    assert lines[0] == "one" and lines[-1] == "five"
    assert lines[1].endswith(
        "supervisor: 3 lines of this log were lost: its disk was full, or its folder could not "
        "be written"
    )
    assert len(lines) == 3
