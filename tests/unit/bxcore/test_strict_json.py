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
