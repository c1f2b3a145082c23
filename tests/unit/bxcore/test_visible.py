"""`bxcore.visible`: the one function every owner view shows foreign text through."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bxcore.visible import (
    HIDDEN,
    IGNORABLE,
    ignorable,
    kind,
    reasons,
    variation_selector,
    visible,
)
from tests.support.shown import unescaped


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


# --- issue 23: every invisible character, and marks without a base --------------------------


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("soft\u00adhyphen", "soft\\xadhyphen"),
        ("bom\ufeff", "bom\\ufeff"),
        ("word\u2060joiner", "word\\u2060joiner"),
        ("zwj\u200dzwnj\u200c", "zwj\\u200dzwnj\\u200c"),
        ("marks \u200e\u200f\u061c", "marks \\u200e\\u200f\\u061c"),
        ("fill\u115f\u1160\u3164\uffa0", "fill\\u115f\\u1160\\u3164\\uffa0"),  # Hangul fillers
        ("cgj a\u034fb", "cgj a\\u034fb"),  # combining grapheme joiner, even after a letter
        ("khmer \u17b4\u17b5", "khmer \\u17b4\\u17b5"),
        ("mongol \u180b\u180c\u180d\u180e\u180f", "mongol \\u180b\\u180c\\u180d\\u180e\\u180f"),
        ("blank \u2800", "blank \\u2800"),  # braille pattern blank
        ("unassigned \u0378 \U0001fffe", "unassigned \\u0378 \\U0001fffe"),
        ("nonchar \uffff", "nonchar \\uffff"),
        ("shorthand \U0001bca0", "shorthand \\U0001bca0"),
        ("beam \U0001d173", "beam \\U0001d173"),
    ],
)
def test_every_character_that_draws_nothing_is_shown_as_an_escape(text: str, shown: str) -> None:
    assert visible(text) == shown


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("\u26a0\ufe0f careful", "\u26a0\ufe0f careful"),  # emoji presentation stays readable
        ("\u845b\U000e0100", "\u845b\U000e0100"),  # an ideographic variant
        ("\u26a0\ufe0f\ufe0f", "\u26a0\ufe0f\\ufe0f"),  # a second one in a row is not
        ("\u26a0\ufe0f\U000e0101\U000e0102", "\u26a0\ufe0f\\U000e0101\\U000e0102"),  # smuggling
        ("a\ufe0f", "a\\ufe0f"),  # after ASCII it selects nothing visible
        ("1\ufe0f", "1\\ufe0f"),
        ("\ufe0f", "\\ufe0f"),  # at the start
        ("\u202e\ufe0f", "\\u202e\\ufe0f"),  # after an escape
        ("e\u0301\ufe0f", "e\u0301\\ufe0f"),  # after a mark, not a base
    ],
)
def test_a_variation_selector_is_kept_only_right_after_a_non_ascii_base(
    text: str, shown: str
) -> None:
    assert visible(text) == shown


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("\u0301start", "\\u0301start"),
        ("ls ;\u0338 rm", "ls ;\\u0338 rm"),  # a slash drawn over the ;
        ("#\u20e0 note", "#\\u20e0 note"),  # a prohibition sign over the #
        ("say '\u0335'", "say '\\u0335'"),
        (" \u0301", " \\u0301"),
        ("\x1b\u0301", "\\x1b\\u0301"),  # it would draw on the escape
        ("\u202e\u0301", "\\u202e\\u0301"),
        ("1\ufe0f\u20e3", "1\\ufe0f\\u20e3"),  # a keycap's selector after ASCII: both escaped
        ("#\u20e3", "#\\u20e3"),  # a keycap that is a shell comment
    ],
)
def test_a_combining_mark_without_a_proper_base_is_shown_as_an_escape(
    text: str, shown: str
) -> None:
    assert visible(text) == shown


@pytest.mark.parametrize(
    "text",
    [
        "cafe\u0301.txt",  # an NFD file name
        "1\u20e3 2\u20e3",  # keycaps on digits
        "\u05e9\u05c1\u05b8\u0591",  # Hebrew letter, shin dot, vowel, accent
        "\u0915\u093f\u0928\u094d",  # Devanagari
        "\u00e9\u0301",  # a mark on a non-ASCII letter
        "e\u0301\u0302\u0303\u0304",  # four marks on one letter
    ],
)
def test_a_combining_mark_on_a_letter_or_digit_is_kept(text: str) -> None:
    assert visible(text) == text


def test_a_fifth_mark_on_one_letter_is_shown_as_an_escape() -> None:
    assert visible("e\u0301\u0302\u0303\u0304\u0305x") == "e\u0301\u0302\u0303\u0304\\u0305x"


def test_after_a_newline_a_mark_has_no_base_even_where_newlines_are_kept() -> None:
    assert visible("a\n\u0301", newlines=True) == "a\n\\u0301"


@pytest.mark.parametrize(
    ("text", "kinds"),
    [
        ("\u202e", ["right-to-left override (U+202E)"]),
        ("\x1b\x01", ["escape (U+001B)", "control character (U+0001)"]),
        ("\U000e0041\U000e0001", ["tag character (U+E0041)", "language tag (U+E0001)"]),
        ("\ufe0f\U000e0105", ["variation selector-16 (U+FE0F)", "variation selector-22 (U+E0105)"]),
        (";\u0338", ["combining mark without a base (U+0338)"]),
        ("e\u0301\u0301\u0301\u0301\u0301", ["combining mark past 4 on one character (U+0301)"]),
        ("\ue000\u0378", ["private-use character (U+E000)", "unassigned code point (U+0378)"]),
        ("\u206a", ["format character (U+206A)"]),
    ],
)
def test_each_escaped_character_is_named_for_the_owner(text: str, kinds: list[str]) -> None:
    found = [
        kind(char, reason)
        for char, reason in zip(text, reasons(text), strict=True)
        if reason is not None
    ]
    assert found == kinds


def test_the_ignorable_table_is_unicodes_default_ignorable_code_points_as_python_knows_them() -> (
    None
):
    # What Python can cross-check: each is a format character, a mark (the combining grapheme
    # joiner, selectors), a filler letter, or unassigned. The browser test compares the whole
    # table with Chromium's \p{Default_Ignorable_Code_Point}.
    for low, high in IGNORABLE:
        for code in range(low, high + 1):
            category = unicodedata.category(chr(code))
            assert category in ("Cf", "Cn", "Mn", "Lo"), (hex(code), category)
    assert ignorable(0x00AD) and ignorable(0xE0FFF) and not ignorable(0x00A0)


@given(st.text())
def test_the_visible_text_holds_every_kept_character_in_order_and_nothing_raw_that_hides(
    text: str,
) -> None:
    shown = visible(text, newlines=True)
    if "\\" not in text:
        assert unescaped(shown) == text  # every character, in logical order
    before = None
    for char in shown:
        category = unicodedata.category(char)
        assert category not in HIDDEN or char in "\n\t"
        code = ord(char)
        if ignorable(code):
            assert variation_selector(code) and before is not None and ord(before) >= 0x80
        if category in ("Mn", "Me"):
            assert before is not None and (ord(before) >= 0x80 or before.isalnum())
        before = char
    assert visible(shown, newlines=True) == shown
