"""Reading the file a `write_file` would replace, for its preview (`preview_file`, SPEC §12.2):
never through a symbolic link, at any component; only a regular file; a missing one is new."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from services.brokerd.core.args import parse
from services.brokerd.core.preview import MAX_OLD
from services.brokerd.preview_file import Unreadable, preview_of, read_old


def write_args(path: Path, content: str) -> str:
    return json.dumps({"path": str(path), "content": content})


def test_a_regular_file_is_read_and_a_missing_one_is_new(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("old\n")
    assert read_old(str(tmp_path / "a.md")) == b"old\n"
    assert read_old(str(tmp_path / "new.md")) is None
    assert read_old(str(tmp_path / "no-folder" / "new.md")) is None


def test_at_most_one_byte_more_than_is_compared_is_read(tmp_path: Path) -> None:
    (tmp_path / "big").write_bytes(b"x" * (MAX_OLD + 5000))
    assert len(read_old(str(tmp_path / "big")) or b"") == MAX_OLD + 1


def test_a_link_at_the_path_or_on_its_way_is_never_followed(tmp_path: Path) -> None:
    secret = tmp_path / "vault" / "key.txt"
    secret.parent.mkdir()
    secret.write_text("the launch code")
    work = tmp_path / "work"
    work.mkdir()
    (work / "link.md").symlink_to(secret)
    (work / "folder").symlink_to(secret.parent)
    (work / "dangling").symlink_to(tmp_path / "nowhere")
    for path in (work / "link.md", work / "folder" / "key.txt", work / "dangling"):
        with pytest.raises(Unreadable):
            read_old(str(path))
        args = parse("write_file", write_args(path, "new"))
        assert preview_of(args) is None


def test_what_is_not_a_regular_file_has_no_preview(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")  # opened for reading, it would wait for a writer
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("x")
    for path in (tmp_path / "fifo", tmp_path / "folder", tmp_path / "file" / "below"):
        with pytest.raises(Unreadable):
            read_old(str(path))


def test_the_preview_of_a_call_compares_the_file_with_its_content(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("one\ntwo\n")
    args = parse("write_file", write_args(tmp_path / "a.md", "one\n2\n"))
    name = str(tmp_path / "a.md").lstrip("/")
    assert preview_of(args) == (f"--- a/{name}\n+++ b/{name}\n@@ -1,2 +1,2 @@\n one\n-two\n+2\n")
