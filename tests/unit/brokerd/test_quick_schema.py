"""`quick_schema`: its yes is always `jsonschema`'s yes (a property over generated schemas and
values), it says yes to the usual shapes, and it leaves every other schema to `jsonschema`."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bxcore.mcp_tools import ToolDef
from services.brokerd.core import mcp_args
from services.brokerd.core.args import ArgsError
from services.brokerd.core.quick_schema import compile_check

TYPES = ["string", "integer", "number", "boolean", "null", "object", "array"]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=5),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(["a", "b", "c", "text"]), inner, max_size=4),
    ),
    max_leaves=12,
)
annotation = st.fixed_dictionaries(
    {}, optional={"title": st.text(max_size=3), "description": st.text(max_size=3)}
)


def _schemas() -> st.SearchStrategy[Any]:
    """Schemas of the subset, and now and then a keyword outside it."""
    kind = st.one_of(
        st.sampled_from(TYPES), st.lists(st.sampled_from(TYPES), min_size=1, unique=True)
    )

    def extend(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        names = st.sampled_from(["a", "b", "c", "text"])
        return st.fixed_dictionaries(
            {},
            optional={
                "type": kind,
                "properties": st.dictionaries(names, inner, max_size=3),
                "required": st.lists(names, max_size=3, unique=True),
                "additionalProperties": st.booleans(),
                "items": inner,
                "minLength": st.integers(min_value=0, max_value=3),
                "enum": st.lists(scalars, min_size=1, max_size=3),
            },
        )

    leaf = st.one_of(st.just(True), st.just(False), st.fixed_dictionaries({"type": kind}))
    return st.recursive(leaf, extend, max_leaves=6)


@settings(max_examples=800, deadline=None)
@given(_schemas(), values)
def test_its_yes_is_always_jsonschemas_yes(schema: Any, value: Any) -> None:
    jsonschema.Draft202012Validator.check_schema(schema)
    check = compile_check(schema)
    if check is not None and check(value):
        assert jsonschema.Draft202012Validator(schema).is_valid(value), (schema, value)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(TYPES), values)
def test_it_agrees_with_jsonschema_on_a_typed_value_but_integral_floats(
    kind: str, value: Any
) -> None:
    check = compile_check({"type": kind})
    assert check is not None
    if not (kind == "integer" and isinstance(value, float)):
        assert check(value) == jsonschema.Draft202012Validator({"type": kind}).is_valid(value)


SEND = {
    "type": "object",
    "title": "send_emailArguments",
    "properties": {
        "to": {"type": "string", "title": "To"},
        "cc": {"type": "array", "items": {"type": "string"}},
        "count": {"type": ["integer", "null"], "default": None},
    },
    "required": ["to"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    "value",
    [
        {"to": "a@b"},
        {"to": "a@b", "cc": ["c@d"], "count": 3},
        {"to": "a@b", "count": None},
    ],
)
def test_the_usual_shape_is_said_yes_to(value: dict[str, Any]) -> None:
    check = compile_check(SEND)
    assert check is not None and check(value)


@pytest.mark.parametrize(
    "value",
    [
        {},  # to is required
        {"to": 1},
        {"to": "a@b", "bcc": "x"},  # no other property
        {"to": "a@b", "cc": [1]},
        {"to": "a@b", "count": True},  # a boolean is not an integer
        {"to": "a@b", "count": 2.0},  # integral: valid, but left to jsonschema
    ],
)
def test_what_it_does_not_know_valid_is_left_to_jsonschema(value: dict[str, Any]) -> None:
    check = compile_check(SEND)
    assert check is not None and not check(value)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}}, "$defs": {"a": {}}},
        {"anyOf": [{"type": "string"}]},
        {"type": "string", "minLength": 2},
        {"type": "object", "additionalProperties": {"type": "string"}},
        {"type": "object", "patternProperties": {"^a": {"type": "string"}}},
        {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object"},
        {"type": "object", "required": "a"},
        {"type": "decimal"},
        False,
    ],
)
def test_any_other_keyword_has_no_quick_check(schema: Any) -> None:
    assert compile_check(schema) is None


def test_a_call_refused_by_jsonschema_still_says_jsonschemas_words() -> None:
    tool = ToolDef("send_email", "Send.", SEND)
    assert mcp_args.parse(tool, "mcp__m__send_email", json.dumps({"to": "a"})).value == {"to": "a"}
    with pytest.raises(ArgsError) as refused:
        mcp_args.parse(tool, "mcp__m__send_email", json.dumps({"to": "a", "bcc": "b"}))
    assert "Additional properties are not allowed ('bcc' was unexpected)" in refused.value.detail()
    assert mcp_args.parse(tool, "n", json.dumps({"to": "a", "count": 2.0})).value["count"] == 2.0
    assert mcp_args.mismatch(json.dumps(SEND), {"to": 3}) == "to: 3 is not of type 'string'"
