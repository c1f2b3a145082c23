"""`bxcore.visible`: the one function every owner view shows foreign text through."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bxcore.visible import HIDDEN, visible


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("clear \x1b[2J", "clear \\x1b[2J"),  # ESC: cursor, colours, screen
        ("title \x1b]0;pwned\x07", "title \\x1b]0;pwned\\x07"),  # OSC and BEL
        ("over\rwrite", "over\\x0dwrite"),  # CR: back to the start of the line
        ("back\x08space", "back\\x08space"),
        ("del\x7f", "del\\x7f"),
        ("c1 \x9b2J", "c1 \\x9b2J"),  # the one-byte CSI
        ("next\x85line", "next\\x85line"),  # NEL
        ("rm \u202eevil", "rm \\u202eevil"),  # right-to-left override
        ("iso \u2066x\u2069", "iso \\u2066x\\u2069"),  # bidi isolates
        ("zero\u200bwidth", "zero\\u200bwidth"),
        ("line\u2028sep\u2029para", "line\\u2028sep\\u2029para"),
        ("private \ue000", "private \\ue000"),
        ("tag \U000e0041", "tag \\U000e0041"),  # invisible tag characters (ASCII smuggling)
        ("a\nb\tc", "a\\x0ab\\x09c"),
    ],
)
def test_control_and_format_characters_are_shown_as_escapes(text: str, shown: str) -> None:
    assert visible(text) == shown


def test_newlines_and_tabs_are_kept_only_when_asked() -> None:
    assert visible("a\nb\tc\rd", newlines=True) == "a\nb\tc\\x0dd"


@pytest.mark.parametrize(
    "text",
    ["[conceal]rm -rf ~[/conceal]", "[/x]", "[bold red]alarm", ":smile:", "<b>x</b>", "中文 é"],
)
def test_printable_text_is_left_as_written_markup_included(text: str) -> None:
    assert visible(text) == text


@given(st.text())
def test_the_result_is_one_line_with_nothing_hidden_and_showing_it_again_changes_nothing(
    text: str,
) -> None:
    shown = visible(text)
    assert not any(unicodedata.category(char) in HIDDEN for char in shown)
    assert visible(shown) == shown
