"""Reading and parsing the arguments in-process: the three parsers (plain objects by hand, the C
scanner `_json`, and `json`) give the same answers, and the input is never read past 2 MiB + 1
bytes."""

from __future__ import annotations

import io
import json
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.toolkit.__main__ import run
from services.toolkit.input import (
    MAX_INPUT,
    ArgumentsError,
    InputError,
    _plain_object,
    parse_arguments,
    quoted,
    read_input,
)
from services.toolkit.outcome import Outcome

SHELL_FIELDS = (("command", True), ("cwd", False))

TEXTS = [
    '{"command":"ls"}',
    '{"command":"ls","cwd":"/tmp"}',
    ' {"cwd" : "/", "command" : "a\\u00e9\\n\\"b"} ',
    '{"command":"☃ 𝄞"}',
    '{"command":""}',
    '{"command":"ls","cwd":"/","command":"x"}',
    '{"command":1}',
    '{"command":"ls"} []',
    "[]",
    "",
    "null",
    "{",
    '{"command":"\\ud83d"}',
    '{"command":Infinity}',
    '{"command":"ls",}',
]


def _parse(text: str) -> dict[str, str] | str:
    try:
        return parse_arguments(text, SHELL_FIELDS)
    except ArgumentsError as error:
        return f"error: {error}"


@pytest.mark.parametrize("text", TEXTS)
def test_the_fast_and_the_slow_parser_agree(text, monkeypatch) -> None:
    fast = _parse(text)
    monkeypatch.setitem(sys.modules, "_json", None)  # import _json now fails: json.loads parses
    monkeypatch.delitem(sys.modules, "json", raising=False)
    monkeypatch.delitem(sys.modules, "json.decoder", raising=False)
    monkeypatch.delitem(sys.modules, "json.scanner", raising=False)
    assert _parse(text) == fast


@pytest.mark.parametrize("text", TEXTS)
def test_the_plain_reader_agrees_with_the_scanners(text, monkeypatch) -> None:
    with_it = _parse(text)
    monkeypatch.setattr("services.toolkit.input._plain_object", lambda text: None)
    assert _parse(text) == with_it


@given(st.dictionaries(st.text(max_size=8), st.text(max_size=40), max_size=4))
def test_the_plain_reader_reads_what_brokerd_sends(fields: dict[str, str]) -> None:
    """The canonical form of string fields: read by hand unless a string needs an escape (or
    holds a character that is not printable), and then exactly as JSON reads it."""
    text = json.dumps(fields, ensure_ascii=False, separators=(",", ":"))
    pairs = _plain_object(text)
    plain = all(
        '"' not in s and "\\" not in s and s.isprintable() for s in (*fields, *fields.values())
    )
    assert pairs == (tuple(fields.items()) if plain and fields else None)


@given(st.text(alphabet='{}":,\\ ab\n', max_size=30))
def test_the_plain_reader_never_reads_what_json_reads_otherwise(text: str) -> None:
    pairs = _plain_object(text)
    if pairs is not None:
        assert json.loads(text, object_pairs_hook=tuple) == pairs


def test_a_valid_object_gives_its_fields() -> None:
    assert parse_arguments(' {"cwd":"/","command":"a\\u00e9"} ', SHELL_FIELDS) == {
        "cwd": "/",
        "command": "aé",
    }


def test_the_input_is_never_read_past_2_mib_and_one_byte() -> None:
    stream = io.BytesIO(b" " * (5 * MAX_INPUT))
    with pytest.raises(InputError, match=r"^the arguments are larger than 2097152 bytes$"):
        read_input(stream)
    assert stream.tell() == MAX_INPUT + 1


def test_a_closed_standard_input_is_no_arguments() -> None:
    assert read_input(None) == ""


def test_run_is_the_whole_program_without_a_process(tmp_path) -> None:
    (tmp_path / "f").write_text("hi")
    stdin = io.BytesIO(f'{{"path":"{tmp_path}/f"}}'.encode())
    assert run("read_file", stdin) == Outcome.done("hi")
    assert run("nope", io.BytesIO(b"{}")) == Outcome.misuse('toolkit: unknown tool "nope"')
    outcome = run("shell", io.BytesIO(b'{"command":"pwd"}'), {"BX_ROOT": str(tmp_path)})
    assert outcome == Outcome.done(f"{tmp_path}\n[exit status 0]")


def test_misuse_never_shows_the_model_anything() -> None:
    assert Outcome.misuse("toolkit: x") == Outcome(2, "", "toolkit: x")


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("read_file", '"read_file"'),
        ("", '""'),
        ('a"b\\c', '"a\\"b\\\\c"'),
        ("a\nb\tc\x00\u2028", '"a\\nb\\tc\\u0000\\u2028"'),
        ("x" * 101, '"' + "x" * 100 + '"…'),
    ],
)
def test_a_name_is_quoted_on_one_line(text, shown) -> None:
    assert quoted(text) == shown
