"""The toolkit's own strict JSON decoder (it cannot import bxcore inside the sandbox) and
`bxcore.strict_json` give the same answers: hostile texts refused by both, anything else read
to the same value (objects as their pairs, a key twice kept: the toolkit refuses it with its
fields, as strict_json's default does)."""

from __future__ import annotations

import io

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bxcore import strict_json
from services.toolkit.input import (
    ArgumentsError,
    InputError,
    _decode,
    parse_arguments,
    read_input,
)

PAIRS = strict_json.Decoder(pairs=True)
FIELDS = (("path", True), ("cwd", False))

HOSTILE = [
    '{"path":"a","path":"b"}',
    '{"path":"a","cwd":{"x":1,"x":2}}',
    '{"path":NaN}',
    '{"path":Infinity}',
    '{"path":-Infinity}',
    "[NaN]",
    "[-Infinity, 1]",
    "[" * 100_000,
    "[" * 100_000 + "]" * 100_000,
    '{"a":' * 50_000 + "1" + "}" * 50_000,
    '{"path":"\\ud800"}',
    '{"path":"\\udc00x"}',
    '{"path":"\\ud83d\\ude00"}',
    '{"path":1e400}',
    '{"path":"a"} x',
    ' {"path":"a"} ',
    '{"path":"a"}\x00',
    '{"path":"a\x01"}',
    "\ufeff{}",
    "",
]


def _toolkit(text: str) -> object:
    try:
        return _shape(_decode(text))
    except (ArgumentsError, ValueError, RecursionError):  # NaN; json's words; nesting
        return "refused"


def _shared(text: str) -> object:
    try:
        return _shape(PAIRS.loads(text))
    except strict_json.StrictJsonError:
        return "refused"


def _shape(value: object) -> object:
    """Objects (the toolkit's tuples, strict_json's `Pairs`) and arrays told apart, compared."""
    if isinstance(value, tuple | strict_json.Pairs):
        return ("object", [(key, _shape(inner)) for key, inner in value])
    if isinstance(value, list):
        return [_shape(inner) for inner in value]
    return value


@pytest.mark.parametrize("text", HOSTILE, ids=lambda t: repr(t[:24]))
def test_both_decoders_give_the_same_answer(text: str) -> None:
    assert _toolkit(text) == _shared(text)


@pytest.mark.parametrize("text", HOSTILE, ids=lambda t: repr(t[:24]))
def test_what_the_shared_default_refuses_the_toolkit_refuses_with_its_fields(text: str) -> None:
    try:
        strict_json.loads(text)
    except strict_json.StrictJsonError:
        with pytest.raises(ArgumentsError):
            parse_arguments(text, FIELDS)


@pytest.mark.parametrize(
    "data", [b'{"path":"\xff"}', b'{"path":"\xed\xa0\x80"}', b'{"path":"\xc0\xaf"}', b"\x80"]
)
def test_bytes_that_are_not_utf8_are_refused_by_both(data: bytes) -> None:
    with pytest.raises(InputError):
        read_input(io.BytesIO(data))
    with pytest.raises(strict_json.NotUtf8):
        strict_json.loads(data)


TOKENS = [
    "{", "}", "[", "]", ":", ",", " ", '"path"', '"a"', '"\\ud800"', "NaN", "Infinity",
    "-Infinity", "1", "-0", "1e400", "1.5", "true", "null", '"x\\u0000"', '"\\"',
]  # fmt: skip


@given(st.lists(st.sampled_from(TOKENS), max_size=14).map("".join))
def test_on_any_text_of_json_s_pieces_both_agree(text: str) -> None:
    assert _toolkit(text) == _shared(text)
