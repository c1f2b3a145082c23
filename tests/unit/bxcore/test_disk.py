"""The sentences of a full disk (`bxcore.home.disk`, issue 28): what a write that found no room is,
how the room left reads, and which disks the home's folders are on."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

import pytest

from bxcore.home import disk


@pytest.mark.parametrize(
    ("size", "said"),
    [
        (0, "0 bytes"),
        (1, "1 byte"),
        (1023, "1023 bytes"),
        (12 * 1024 + 5, "12 KB"),
        (1024**2 - 1, "1023 KB"),
        (int(3.4 * 1024**2), "3.4 MB"),
        (250 * 1024**2, "250 MB"),
        (int(1.5 * 1024**3), "1.5 GB"),
        (2048 * 1024**3, "2048 GB"),
    ],
)
def test_an_amount_reads_as_the_owner_expects(size: int, said: str) -> None:
    assert disk.amount(size) == said


def test_the_full_disk_sentence_names_the_folder_and_the_room_left() -> None:
    folder = Path("/h/sessions")
    assert disk.full(folder, 12 * 1024) == "the disk holding /h/sessions is full (12 KB free)"
    assert disk.full(folder, None) == "the disk holding /h/sessions is full"


@pytest.mark.parametrize(
    ("free", "full"),
    [(None, False), (0, True), (disk.FULL_BELOW - 1, True), (disk.FULL_BELOW, False)],
)
def test_a_disk_is_full_below_a_mebibyte_of_room(free: int | None, full: bool) -> None:
    assert disk.is_full(free) is full


def _sqlite_full() -> sqlite3.OperationalError:
    error = sqlite3.OperationalError("database or disk is full")
    error.sqlite_errorcode = sqlite3.SQLITE_FULL  # as sqlite3 sets it
    return error


def _wrapped() -> Exception:
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as error:
            raise RuntimeError("the store failed") from error
    except RuntimeError as outer:
        return outer


@pytest.mark.parametrize(
    ("error", "lacks"),
    [
        (OSError(errno.ENOSPC, "No space left on device"), True),
        (OSError(errno.EDQUOT, "Disk quota exceeded"), True),
        (OSError(errno.EIO, "Input/output error"), False),
        (PermissionError(errno.EACCES, "Permission denied"), False),
        (_sqlite_full(), True),
        (sqlite3.OperationalError("database is locked"), False),
        (_wrapped(), True),
    ],
)
def test_a_write_that_found_no_room_is_told_from_other_failures(
    error: BaseException, lacks: bool
) -> None:
    assert disk.lacks_room(error) is lacks


def test_a_failure_other_than_room_is_said_in_the_os_words(tmp_path: Path) -> None:
    said = disk.unwritable(tmp_path, OSError(errno.EIO, "Input/output error"))
    assert said == f"cannot write in {tmp_path}: Input/output error"
    full = disk.unwritable(tmp_path, OSError(errno.ENOSPC, "No space left on device"))
    assert full.startswith(f"the disk holding {tmp_path} is full (") and full.endswith(" free)")


def test_the_room_of_a_folder_not_made_yet_is_its_parents(tmp_path: Path) -> None:
    assert disk.free_bytes(tmp_path / "not" / "yet") == disk.free_bytes(tmp_path)
    assert disk.free_bytes(tmp_path) is not None


def test_folders_on_one_disk_are_told_as_one(tmp_path: Path) -> None:
    (tmp_path / "audit").mkdir()
    found = disk.places([("the ledger", tmp_path / "audit"), ("the logs", tmp_path / "logs")])
    assert [(d.folder, d.holds) for d in found] == [
        (tmp_path / "audit", ("the ledger", "the logs"))
    ]
    place = disk.Disk(Path("/h/audit"), ("the ledger", "the histories", "the logs"), 0)
    assert place.full
    assert place.sentence() == (
        "the disk holding /h/audit is full (0 bytes free): the ledger, the histories and the "
        "logs cannot be written"
    )
