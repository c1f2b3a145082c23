"""The `write_file` preview (`services.brokerd.core.preview`, SPEC §12.2): a unified diff of the
file as it is against what would be written, cut at 64 KiB with a line saying so; content that
is not text, or too large to compare, is described instead."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bxcore.wire.messages import MAX_PREVIEW
from services.brokerd.core.preview import MAX_OLD, lines_of, write_preview


def test_a_new_file_is_all_added_lines_from_dev_null() -> None:
    assert write_preview("/w/new.md", None, "hello\nworld\n") == (
        "--- /dev/null\n+++ b/w/new.md\n@@ -0,0 +1,2 @@\n+hello\n+world\n"
    )


def test_a_changed_file_shows_only_what_changes_with_its_context() -> None:
    old = b"".join(f"line {n}\n".encode() for n in range(1, 11))
    new = old.decode().replace("line 5\n", "line five\n")
    assert write_preview("/w/a.md", old, new) == (
        "--- a/w/a.md\n"
        "+++ b/w/a.md\n"
        "@@ -2,7 +2,7 @@\n"
        " line 2\n line 3\n line 4\n-line 5\n+line five\n line 6\n line 7\n line 8\n"
    )


def test_a_last_line_without_a_newline_is_marked_as_git_marks_it() -> None:
    assert write_preview("/w/a", b"one\n", "one\ntwo") == (
        "--- a/w/a\n+++ b/w/a\n@@ -1 +1,2 @@\n one\n+two\n\\ No newline at end of file\n"
    )


def test_only_a_newline_ends_a_line_as_in_the_file() -> None:
    assert lines_of("a\rb\x0cc\u2028d\ne") == ["a\rb\x0cc\u2028d\n", "e"]
    assert lines_of("") == [] and lines_of("\n") == ["\n"]


def test_the_same_content_and_an_empty_new_file_are_said_in_words() -> None:
    assert write_preview("/w/a", b"same\n", "same\n") == (
        "/w/a already holds exactly this content (5 bytes): nothing changes\n"
    )
    assert write_preview("/w/a", None, "") == "/w/a does not exist: it would be made, empty\n"
    assert write_preview("/w/a", b"gone\n", "") == ("--- a/w/a\n+++ b/w/a\n@@ -1 +0,0 @@\n-gone\n")


@pytest.mark.parametrize("old", [b"\xff\xfe\x00binary", b"caf\xe9\n"], ids=["binary", "latin-1"])
def test_old_content_that_is_not_utf8_is_described_and_all_of_the_new_added(old: bytes) -> None:
    preview = write_preview("/w/a", old, "text\n")
    assert preview == (
        f"/w/a holds {len(old)} bytes now that are not UTF-8 text: all of them would be "
        "replaced\n--- a/w/a\n+++ b/w/a\n@@ -0,0 +1 @@\n+text\n"
    )


def test_an_old_file_larger_than_1_mib_is_not_compared() -> None:
    preview = write_preview("/w/big", b"x" * (MAX_OLD + 1), "small\n")
    assert preview == (
        "/w/big holds more than 1,048,576 bytes now: no difference is shown; "
        "it would be replaced by 6 bytes\n"
    )
    assert write_preview("/w/big", b"x" * MAX_OLD, "x").startswith("--- a/w/big\n")


def test_a_large_difference_is_cut_at_64_kib_with_a_last_line_saying_so() -> None:
    new = "".join(f"line {n} é\n" for n in range(20_000))  # about 240 kB of diff
    whole = "--- /dev/null\n+++ b/w/long\n@@ -0,0 +1,20000 @@\n" + "".join(
        f"+{line}" for line in lines_of(new)
    )
    preview = write_preview("/w/long", None, new)
    assert MAX_PREVIEW - 200 < len(preview.encode()) <= MAX_PREVIEW  # as much as fits
    shown, last = preview[: preview.rindex("[…")], preview[preview.rindex("[…") :]
    if not whole.startswith(shown):  # cut inside a line: the cut line starts its own
        shown = shown.removesuffix("\n")
        assert whole.startswith(shown)
    cut = len(whole.encode()) - len(shown.encode())
    assert last == f"[… the difference is cut here: {cut:,} more bytes are not shown]\n"


def test_a_cut_never_splits_a_character() -> None:
    preview = write_preview("/w/wide", None, "é" * 100_000)
    assert len(preview.encode()) <= MAX_PREVIEW
    assert "\ufffd" not in preview
    assert preview.endswith("more bytes are not shown]\n")


@given(
    old=st.none() | st.binary(max_size=300), new=st.text(max_size=300), limit=st.integers(120, 400)
)
def test_any_preview_fits_its_limit_and_is_text(old: bytes | None, new: str, limit: int) -> None:
    preview = write_preview("/w/f", old, new, limit)
    assert len(preview.encode("utf-8")) <= limit
    assert preview.endswith("\n")
