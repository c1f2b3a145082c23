"""Strict JSON for what someone else wrote: what it takes as json does, and what it refuses."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bxcore import strict_json
from bxcore.strict_json import StrictJsonError

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)  # fmt: skip


@given(JSON)
def test_what_json_writes_it_reads_back_alike(value: object) -> None:
    text = json.dumps(value)
    assert strict_json.loads(text) == json.loads(text)
    assert strict_json.loads(text.encode()) == json.loads(text)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"a":1,"a":2}', "duplicate field `a`"),
        ('{"b":{"x\\u001b[2J":1,"x\\u001b[2J":2}}', "duplicate field `…`"),  # not printable
        ("{" + '"' + "k" * 101 + '":1,"' + "k" * 101 + '":2}', "duplicate field `…`"),
        ('{"a":NaN}', "NaN is not a JSON value"),
        ("[-Infinity]", "-Infinity is not a JSON value"),
        ('{"a":1} x', "Extra data"),
        ("", "Expecting value"),
        (b"\xff", "codec can't decode"),
        ("[" * 100_000, "nested too deeply"),
    ],
)
def test_what_it_refuses_it_says_in_one_line(text: str | bytes, why: str) -> None:
    with pytest.raises(StrictJsonError) as refused:
        strict_json.loads(text)
    assert why in str(refused.value) and "\n" not in str(refused.value)


def test_a_decoder_keeps_pairs_and_numbers_as_written_when_asked() -> None:
    value = strict_json.Decoder(pairs=True, as_written=True).loads('{"a":1e+16,"a":[-0]}')
    assert isinstance(value, strict_json.Pairs)
    assert value == [("a", "1e+16"), ("a", ["-0"])]
    assert all(isinstance(n, strict_json.Number) for n in (value[0][1], value[1][1][0]))


@pytest.mark.parametrize(
    ("decoder", "text", "refusal"),
    [
        (strict_json.Decoder(max_digits=3), "[-999, 1000]", strict_json.OutOfRange),
        (strict_json.Decoder(finite=True), "[1e400]", strict_json.OutOfRange),
        (strict_json.Decoder(surrogates=False), '["\\ud800"]', strict_json.LoneSurrogate),
        (strict_json.Decoder(max_depth=2), "[[[]]]", strict_json.TooDeep),
        (strict_json.Decoder(pairs=True), '{"a":NaN}', strict_json.NotAValue),
        (strict_json.Decoder(), '{"a":1,"a":1}', strict_json.Twice),
        (strict_json.Decoder(), b'"\xed\xa0\x80"', strict_json.NotUtf8),  # no surrogatepass
        (strict_json.Decoder(), b"\xef\xbb\xbf{}", strict_json.Syntax),  # no BOM
        (strict_json.Decoder(), "9" * 5000, strict_json.OutOfRange),
    ],
)
def test_each_choice_refuses_with_its_own_kind(
    decoder: strict_json.Decoder, text: str | bytes, refusal: type[StrictJsonError]
) -> None:
    with pytest.raises(refusal):
        decoder.loads(text)


def test_what_a_choice_bounds_it_takes_up_to_the_bound() -> None:
    assert strict_json.Decoder(max_digits=3).loads("[-999]") == [-999]
    assert strict_json.Decoder(max_depth=2).loads("[[]]") == [[]]
    assert strict_json.Decoder(surrogates=False).loads('"\\ud83d\\ude00"') == "\U0001f600"


def test_first_reads_one_value_and_says_where_it_ends() -> None:
    assert strict_json.Decoder().first('{"a":1} x', 0) == ({"a": 1}, 7)
    with pytest.raises(strict_json.Syntax):
        strict_json.Decoder().first(' {"a":1}', 0)  # no whitespace skipped


@given(JSON)
def test_depth_counts_arrays_and_objects(value: object) -> None:
    def deep(v: object) -> int:
        inner = v.values() if isinstance(v, dict) else v if isinstance(v, list) else None
        return 0 if inner is None else 1 + max(map(deep, inner), default=0)

    assert strict_json.depth(value) == deep(value)
