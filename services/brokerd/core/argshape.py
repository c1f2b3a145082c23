"""A tool's argument object for `args.parse`: a `ToolSpec`'s fields, refused as serde words it.

The JSON-level refusals (what serde_json refuses and Python's json would let through: NaN, a
number out of range, a lone surrogate) are `bxcore.strict_json`'s, worded as serde words them;
this module owns the object's shape: exactly the fields a `ToolSpec` declares, each of its
kind, errors met in serde's order. It never looks inside a value beyond its type. Pure: no
I/O, no clock.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from bxcore import strict_json
from bxcore.frozen import frozen
from bxcore.strict_json import Pairs
from bxcore.tools import Field, Kind, ToolSpec

Value = str | int

I64_MIN = -(2**63)
I64_MAX = 2**63 - 1
# serde_json reads an integer too long for 64 bits as a float, and refuses one past the largest
# float (about 1.8e308, 309 digits) as "number out of range"; Python would convert any length.
MAX_DIGITS = 309

_WHITESPACE = re.compile(r"[ \t\n\r]*")  # JSON's whitespace, as Python's json skips it


class ShapeError(Exception):
    """Why the arguments do not have the tool's shape: the text after `invalid argument shape: `."""


@frozen
class Decoded:
    variant: str | None  # the tag's value, for a tagged tool
    values: tuple[tuple[str, Value], ...]  # in declared order; an absent optional field left out


def decode(spec: ToolSpec, text: str) -> Decoded:
    """Decode `text` into exactly `spec`'s fields, or raise `ShapeError` saying why."""
    value, end = _load(text)
    if not isinstance(value, Pairs):
        raise ShapeError(f"invalid type: {json_kind(value)}, expected an object")
    if spec.tag is None:
        decoded = Decoded(None, _struct(spec.fields, value))
    else:
        variant, rest = _variant(spec, spec.tag, value)
        decoded = Decoded(variant, _struct(fields_of(spec, variant), rest))
    if end != len(text):  # serde_json looks for trailing text only once the value is decoded
        raise ShapeError(str(json.JSONDecodeError("Extra data", text, end)))
    return decoded


def fields_of(spec: ToolSpec, variant: str | None) -> tuple[Field, ...]:
    """The fields of `spec` in declared order: its own, then those of its variant (if tagged)."""
    for each in spec.variants:
        if each.name == variant:
            return spec.fields + each.fields
    return spec.fields


_DECODER = strict_json.Decoder(pairs=True, max_digits=MAX_DIGITS, finite=True, surrogates=False)


def _load(text: str) -> tuple[object, int]:
    """The first JSON value in `text` and where the text after it (whitespace skipped) starts."""
    try:
        value, end = _DECODER.first(text, _skip_whitespace(text, 0))
    except strict_json.TooDeep:
        raise ShapeError("recursion limit exceeded") from None
    except strict_json.StrictJsonError as error:  # serde's words: strict_json says them alike
        raise ShapeError(str(error)) from None
    return value, _skip_whitespace(text, end)


def _skip_whitespace(text: str, at: int) -> int:
    match = _WHITESPACE.match(text, at)
    return match.end() if match else at


def _variant(
    spec: ToolSpec, tag: str, pairs: list[tuple[str, object]]
) -> tuple[str, list[tuple[str, object]]]:
    """serde's internally tagged enum: the tag is found first, over the whole object; the other
    pairs are kept, in order, for the variant's fields."""
    names = [each.name for each in spec.variants]
    found: str | None = None
    rest: list[tuple[str, object]] = []
    for key, value in pairs:
        if key != tag:
            rest.append((key, value))
            continue
        if found is not None:
            raise ShapeError(f"duplicate field `{tag}`")
        if not isinstance(value, str):
            raise ShapeError(f"invalid type: {_unexpected(value)}, expected a string")
        if value not in names:
            raise ShapeError(f"unknown variant `{value}`, {_expected(names, 'variants')}")
        found = value
    if found is None:
        raise ShapeError(f"missing field `{tag}`")
    return found, rest


def _struct(
    fields: Sequence[Field], pairs: list[tuple[str, object]]
) -> tuple[tuple[str, Value], ...]:
    """serde's derived struct with `deny_unknown_fields`: keys in document order, the first
    unknown key, repeated key or wrongly typed value wins; then missing fields, in declared
    order."""
    by_name = {field.name: field for field in fields}
    got: dict[str, Value | None] = {}
    for key, value in pairs:
        field = by_name.get(key)
        if field is None:
            raise ShapeError(f"unknown field `{key}`, {_expected(list(by_name), 'fields')}")
        if key in got:
            raise ShapeError(f"duplicate field `{key}`")
        got[key] = _value(field, value)
    values: list[tuple[str, Value]] = []
    for field in fields:
        if field.name not in got and not field.optional:
            raise ShapeError(f"missing field `{field.name}`")
        value = got.get(field.name)
        if value is not None:
            values.append((field.name, value))
    return tuple(values)


def _value(field: Field, value: object) -> Value | None:
    if value is None and field.optional:  # serde's Option: null is absent
        return None
    if field.kind is Kind.INT:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ShapeError(f"invalid type: {_unexpected(value)}, expected an integer")
        if not I64_MIN <= value <= I64_MAX:
            raise ShapeError(
                f"invalid value: {_unexpected(value)}, expected a 64-bit signed integer"
            )
        return value
    if not isinstance(value, str):
        raise ShapeError(f"invalid type: {_unexpected(value)}, expected a string")
    return value


def _expected(names: Sequence[str], what: str) -> str:
    """serde's `OneOf`: the names a key (or a variant) could have been."""
    quoted = [f"`{name}`" for name in names]
    if not quoted:
        return f"there are no {what}"
    if len(quoted) == 1:
        return f"expected {quoted[0]}"
    if len(quoted) == 2:
        return f"expected {quoted[0]} or {quoted[1]}"
    return f"expected one of {', '.join(quoted)}"


def _unexpected(value: object) -> str:
    """serde's `Unexpected`, as serde_json prints it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean `{'true' if value else 'false'}`"
    if isinstance(value, int):
        return f"integer `{value}`"
    if isinstance(value, float):
        return f"floating point `{value!r}`"
    if isinstance(value, str):
        return f"string {json.dumps(value, ensure_ascii=False)}"
    if isinstance(value, list) and not isinstance(value, Pairs):
        return "sequence"
    return "map"


def json_kind(value: object) -> str:
    """What a top-level value that is not an object is (JSON's names)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array"
