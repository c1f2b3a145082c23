"""`bxcore.shown_arguments`: a tool call's arguments as a card draws them (issue 23), case by
case, and as properties: the card loses no character, and what it shows reads back as exactly
the value that runs."""

from __future__ import annotations

import json
import unicodedata
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bxcore.shown_arguments import RUN, marker, shown_arguments, shown_text
from bxcore.visible import HIDDEN, reasons
from tests.support.shown import as_json

RED_TEAM = "ls . \u202e\u2066; rm -rf victim \u2069 \u2066#\u2069\u202c"


def drawn(value: Any, indent: int | None = 2) -> str:
    return shown_arguments(json.dumps(value, ensure_ascii=False), indent=indent).text


def test_arguments_are_drawn_as_pretty_json_in_their_order() -> None:
    text = '{"b":1,"a":[true,null,{}],"c":{"d":[]}}'
    assert shown_arguments(text).text == json.dumps(json.loads(text), indent=2)
    assert shown_arguments(text, indent=None).text == json.dumps(json.loads(text))


def test_numbers_are_shown_as_written_and_a_repeated_key_is_kept() -> None:
    text = '{"n":12345678901234567890,"f":1e+16,"g":1.0000000000000001,"n":-0}'
    assert shown_arguments(text, indent=None).text == (
        '{"n": 12345678901234567890, "f": 1e+16, "g": 1.0000000000000001, "n": -0}'
    )


def test_the_red_teams_command_reads_in_logical_order_and_is_named() -> None:
    shown = shown_arguments(json.dumps({"command": RED_TEAM}))
    assert shown.lines()[1] == (
        '  "command": "ls . \\u202e\\u2066; rm -rf victim \\u2069 \\u2066#\\u2069\\u202c"'
    )
    assert shown.warnings() == [
        "These arguments hold characters that change or hide how text is drawn, shown escaped: "
        "right-to-left override (U+202E), left-to-right isolate (U+2066), pop directional "
        "isolate (U+2069), pop directional formatting (U+202C)."
    ]


def test_inside_a_string_quotes_backslashes_newlines_and_tabs_are_jsons_own_escapes() -> None:
    assert drawn({"s": 'a"b\\c\nd\te'}, None) == '{"s": "a\\"b\\\\c\\nd\\te"}'
    assert drawn({"s": "\\u202e"}, None) == '{"s": "\\\\u202e"}'  # a literal: not an escape


def test_keys_go_through_the_rule_too() -> None:
    shown = shown_arguments(json.dumps({"pa\u200bth": "/w"}))
    assert shown.lines()[1] == '  "pa\\u200bth": "/w"'
    assert shown.escaped == (("zero width space", 0x200B),)


@pytest.mark.parametrize(
    ("value", "shown", "markers"),
    [
        ("echo cleaning-cache" + " " * 400 + "; echo x", "echo cleaning-cache⟨400 spaces⟩; echo x",
         ("⟨400 spaces⟩",)),
        ("a" + " " * (RUN - 1) + "b", "a" + " " * (RUN - 1) + "b", ()),
        ("a" + "\u00a0" * RUN + "b", "a⟨16 × U+00A0⟩b", ("⟨16 × U+00A0⟩",)),
        ("a" + " \u00a0" * 20 + "b", "a" + " \u00a0" * 20 + "b", ()),
    ],
)  # fmt: skip
def test_a_long_run_of_one_white_space_character_is_a_marker_with_its_length(
    value: str, shown: str, markers: tuple[str, ...]
) -> None:
    drawing = shown_arguments(json.dumps({"c": value}), indent=None)
    assert drawing.text == '{"c": "' + shown + '"}'
    assert drawing.markers == markers
    if markers:
        assert drawing.warnings() == [
            "These arguments hold long runs of white space, each shown as a marker with its "
            f"length: {markers[0]}."
        ]


def test_a_value_cannot_draw_a_marker_of_its_own() -> None:
    drawing = shown_arguments(json.dumps({"c": "⟨400 spaces⟩"}), indent=None)
    assert drawing.text == '{"c": "\\u27e8400 spaces⟩"}'
    assert drawing.warnings() == [
        "These arguments hold the character ⟨ (U+27E8), shown escaped: markers begin with it."
    ]


def test_every_kind_is_named_with_up_to_eight_of_its_code_points_and_the_rest_counted() -> None:
    tags = "".join(chr(0xE0041 + n) for n in range(10))
    (said,) = shown_arguments(json.dumps({"c": f"\u202e{tags}\x01\x02"})).warnings()
    assert said.endswith(
        "shown escaped: right-to-left override (U+202E), tag character (U+E0041, U+E0042, "
        "U+E0043, U+E0044, U+E0045, U+E0046, U+E0047, U+E0048, and 2 more), control character "
        "(U+0001, U+0002)."
    )


def test_arguments_that_are_not_json_are_shown_as_the_text_they_are() -> None:
    assert shown_arguments('{"command": "ls\u202e').text == '{"command": "ls\\u202e'
    assert shown_arguments("NaN").text == "NaN"
    deep = "[" * 65 + "]" * 65
    assert shown_arguments(deep).text == deep
    assert shown_arguments("[" * 64 + "]" * 64).text.count("\n") == 2 * 63


def test_plain_text_keeps_its_newlines_and_marks_long_runs_of_tabs() -> None:
    assert shown_text("a\n\tb" + "\t" * 20 + "c\u202e").text == "a\n\tb⟨20 tabs⟩c\\u202e"


def test_markers_are_named_plainly() -> None:
    assert marker(" ", 400) == "⟨400 spaces⟩"
    assert marker("\t", 16) == "⟨16 tabs⟩"
    assert marker("\u3000", 20) == "⟨20 × U+3000⟩"


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
SPACEY = st.text(st.sampled_from(' \u00a0\u3000\t\n"\\⟨a\u202e\u0301\ufe0f\u26a0'), max_size=60)


@given(JSON)
def test_the_card_never_loses_a_character(value: Any) -> None:
    for indent in (2, None):
        assert json.loads(as_json(drawn(value, indent))) == value


@given(SPACEY)
def test_runs_escapes_and_markers_read_back_as_the_string_they_stand_for(value: str) -> None:
    assert json.loads(as_json(drawn({"c": value}))) == {"c": value}


@given(JSON)
def test_nothing_the_rule_escapes_is_drawn_raw(value: Any) -> None:
    text = drawn(value)
    assert not any(reason is not None for reason in reasons(text, newlines=True))
    assert not [char for char in text if char != "\n" and unicodedata.category(char) in HIDDEN]
