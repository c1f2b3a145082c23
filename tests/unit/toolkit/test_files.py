"""`read_file` and `write_file`: every exit, word for word (SPEC §8.3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.toolkit.files import read_file, write_file
from services.toolkit.outcome import Outcome

MIB = 1024 * 1024


def _read(toolkit, path: Path | str):
    return toolkit("read_file", {"path": str(path)})


def _write(toolkit, path: Path | str, content: str):
    return toolkit("write_file", {"path": str(path), "content": content})


# --- read_file ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    ["no newline at the end", "two\nlines\n", "crlf\r\nkept\r\n", "héllo ☃ 𝄞", "", "\ufeffbom"],
)
def test_read_file_returns_the_content_exactly_with_nothing_added(toolkit, tmp_path, content):
    path = tmp_path / "f.txt"
    path.write_bytes(content.encode())
    ran = _read(toolkit, path)
    assert (ran.exit, ran.stdout, ran.stderr) == (0, content, "")


def test_read_file_of_a_missing_file_says_no_such_file(toolkit, tmp_path) -> None:
    ran = _read(toolkit, tmp_path / "missing.txt")
    assert (ran.exit, ran.stdout, ran.stderr) == (
        1,
        f"read_file: {tmp_path}/missing.txt: no such file",
        "",
    )


def test_read_file_of_a_dangling_symlink_says_no_such_file(toolkit, tmp_path) -> None:
    (tmp_path / "link").symlink_to(tmp_path / "gone")
    assert _read(toolkit, tmp_path / "link").stdout == f"read_file: {tmp_path}/link: no such file"


def test_read_file_of_a_folder_says_is_a_directory(toolkit, tmp_path) -> None:
    ran = _read(toolkit, tmp_path)
    assert (ran.exit, ran.stdout) == (1, f"read_file: {tmp_path}: is a directory")


def test_read_file_through_a_regular_file_gives_the_metadata_error_text(toolkit, tmp_path):
    (tmp_path / "file").write_text("x")
    ran = _read(toolkit, tmp_path / "file" / "x")
    assert (ran.exit, ran.stdout) == (1, f"read_file: {tmp_path}/file/x: Not a directory")


def test_read_file_through_a_symlink_loop_gives_the_metadata_error_text(toolkit, tmp_path):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    ran = _read(toolkit, tmp_path / "loop")
    assert ran.stdout == f"read_file: {tmp_path}/loop: Too many levels of symbolic links"


def test_read_file_of_exactly_1_mib_is_fine(toolkit, tmp_path) -> None:
    content = ("0123456789abcdef" * (MIB // 16))[: MIB - 3] + "☃"  # ends in a 3-byte character
    path = tmp_path / "f.txt"
    path.write_text(content)
    assert path.stat().st_size == MIB
    ran = _read(toolkit, path)
    assert (ran.exit, ran.stdout == content, ran.stderr) == (0, True, "")


def test_read_file_of_1_mib_and_one_byte_is_refused(toolkit, tmp_path) -> None:
    path = tmp_path / "f.txt"
    path.write_bytes(b"a" * (MIB + 1))
    ran = _read(toolkit, path)
    assert (ran.exit, ran.stdout) == (1, f"read_file: {path}: larger than 1048576 bytes")


def test_read_file_never_reads_a_whole_endless_file(toolkit) -> None:
    ran = _read(toolkit, "/dev/zero")
    assert (ran.exit, ran.stdout) == (1, "read_file: /dev/zero: larger than 1048576 bytes")


@pytest.mark.parametrize(
    "data", [b"\xff\xfe", b"caf\xe9", b"ok then \xed\xa0\x80", b"cut \xe2\x98"]
)
def test_read_file_of_what_is_not_utf8_says_not_utf8_text(toolkit, tmp_path, data) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    assert _read(toolkit, path).stdout == f"read_file: {path}: not UTF-8 text"


# --- write_file --------------------------------------------------------------------------


def test_write_file_counts_bytes_not_characters(toolkit, tmp_path) -> None:
    content = "héllo ☃"  # 7 characters, 10 bytes
    path = tmp_path / "out.txt"
    ran = _write(toolkit, path, content)
    assert (ran.exit, ran.stdout, ran.stderr) == (0, f"wrote 10 bytes to {path}", "")
    assert path.read_bytes() == content.encode()


def test_write_file_replaces_a_longer_file(toolkit, tmp_path) -> None:
    path = tmp_path / "out.txt"
    path.write_text("a much longer old content\n")
    assert _write(toolkit, path, "new").stdout == f"wrote 3 bytes to {path}"
    assert path.read_text() == "new"


def test_write_file_of_empty_content_writes_an_empty_file(toolkit, tmp_path) -> None:
    path = tmp_path / "empty"
    assert _write(toolkit, path, "").stdout == f"wrote 0 bytes to {path}"
    assert path.read_bytes() == b""


def test_write_file_into_a_missing_folder_creates_no_folder(toolkit, tmp_path) -> None:
    path = tmp_path / "missing" / "deeper" / "f.txt"
    ran = _write(toolkit, path, "x")
    assert (ran.exit, ran.stdout, ran.stderr) == (
        1,
        f"write_file: {path}: the directory does not exist",
        "",
    )
    assert not (tmp_path / "missing").exists()
    assert list(tmp_path.iterdir()) == []


def test_write_file_under_a_regular_file_says_the_directory_does_not_exist(toolkit, tmp_path):
    (tmp_path / "file").write_text("keep")
    path = tmp_path / "file" / "x"
    assert _write(toolkit, path, "x").stdout == f"write_file: {path}: the directory does not exist"
    assert (tmp_path / "file").read_text() == "keep"


def test_write_file_onto_a_folder_says_is_a_directory(toolkit, tmp_path) -> None:
    (tmp_path / "sub").mkdir()
    ran = _write(toolkit, tmp_path / "sub", "x")
    assert (ran.exit, ran.stdout) == (1, f"write_file: {tmp_path}/sub: is a directory")
    assert (tmp_path / "sub").is_dir()


def test_write_file_that_fails_gives_the_error_text(toolkit, tmp_path) -> None:
    path = tmp_path / ("n" * 300)  # longer than NAME_MAX (255)
    ran = _write(toolkit, path, "x")
    assert (ran.exit, ran.stdout) == (1, f"write_file: {path}: File name too long")


# --- the same functions called in-process ------------------------------------------------


def test_the_file_tools_are_plain_functions_returning_an_outcome(tmp_path) -> None:
    path = tmp_path / "f"
    assert write_file(str(path), "☃") == Outcome(0, f"wrote 3 bytes to {path}", "")
    assert read_file(str(path)) == Outcome.done("☃")
    assert read_file(str(tmp_path / "no")) == Outcome.tool_error(
        f"read_file: {tmp_path}/no: no such file"
    )
