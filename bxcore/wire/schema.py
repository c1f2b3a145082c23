"""The strict decoder and canonical encoder behind the wire (SPEC §3.1), driven by dataclasses.

A message type is a frozen dataclass whose annotations say what each field holds; this module
compiles one decoder and one encoder per type, once. Decoding is strict at every depth: an
unknown, missing or repeated key, a wrong type (a bool is not an int), a string that is not
valid Unicode, or a value outside its bounds is a `SchemaError` naming the field. Pure: no I/O.

Field spellings: a Python name with a trailing underscore is the wire key without it
(`class_` is `"class"`). A field whose default is `None` is optional and left out when `None`.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from bxcore.frozen import frozen
from bxcore.strict_json import Pairs


class SchemaError(ValueError):
    """A value does not fit its declared shape; the text is one line naming the field."""


Obj = Pairs  # a JSON object as its key/value pairs in document order: repeated keys are seen


@frozen
class Text:
    """A string of `low` to `high` UTF-8 bytes, optionally passing `check`, described as `what`."""

    low: int = 0
    high: int | None = None
    check: Callable[[str], bool] | None = None
    what: str = "a string"


@frozen
class Int:
    """An integer from `low` to `high` (JSON numbers with a fraction or exponent are not ints)."""

    low: int = 0
    high: int = 2**53


@frozen
class Flat:
    """A union of variants written inline in the enclosing object, chosen by the key `key`."""

    key: str


@frozen
class Tagged:
    """A union of variants written as a nested object, chosen by its key `key`."""

    key: str


class Variant(Protocol):
    TAG: ClassVar[str]


Decoder = Callable[[Any, str], Any]
Encoder = Callable[[Any], Any]


def describe(value: Any) -> str:
    """A short, one-line account of a JSON value, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Obj):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:40] + "…"
        return "a string " + repr(shown)
    if isinstance(value, float):
        return f"the number {value!r}"
    return f"the integer {value}" if abs(value) < 10**20 else "a very large integer"


def _wrong(path: str, expected: str, value: Any) -> SchemaError:
    return SchemaError(f"{path}: expected {expected}, got {describe(value)}")


def _text_decoder(spec: Text) -> Decoder:
    low, high, check, what = spec.low, spec.high, spec.check, spec.what

    def decode(value: Any, path: str) -> str:
        if type(value) is not str:
            raise _wrong(path, what, value)
        if value.isascii():
            size = len(value)
        else:
            try:
                size = len(value.encode("utf-8"))
            except UnicodeEncodeError:
                raise SchemaError(f"{path}: a string holds a lone surrogate") from None
        if high is not None and size > high:
            raise SchemaError(f"{path}: expected {what} of at most {high} bytes, got {size}")
        if size < low:
            raise SchemaError(f"{path}: expected {what} of at least {low} bytes, got {size}")
        if check is not None and not check(value):
            raise _wrong(path, what, value)
        return value

    return decode


def _int_decoder(spec: Int) -> Decoder:
    def decode(value: Any, path: str) -> int:
        if type(value) is not int:
            raise _wrong(path, "an integer", value)
        if not spec.low <= value <= spec.high:
            raise SchemaError(
                f"{path}: expected an integer from {spec.low} to {spec.high}, got {describe(value)}"
            )
        return value

    return decode


def _bool_decode(value: Any, path: str) -> bool:
    if type(value) is not bool:
        raise _wrong(path, "true or false", value)
    return value


def _enum_decoder(cls: type[enum.Enum]) -> Decoder:
    by_value = {member.value: member for member in cls}
    expected = "one of " + ", ".join(f'"{v}"' for v in by_value)

    def decode(value: Any, path: str) -> enum.Enum:
        member = by_value.get(value) if type(value) is str else None
        if member is None:
            raise _wrong(path, expected, value)
        return member

    return decode


def _tuple_decoder(item: Decoder) -> Decoder:
    def decode(value: Any, path: str) -> tuple[Any, ...]:
        if type(value) is not list:
            raise _wrong(path, "an array", value)
        return tuple(item(v, f"{path}[{i}]") for i, v in enumerate(value))

    return decode


@dataclass(slots=True)
class _Field:
    name: str
    key: str
    optional: bool
    decode: Decoder
    encode: Encoder
    flat: dict[str, _Codec] | None = None  # for a Flat union: tag value -> variant codec


@dataclass(slots=True)
class _Codec:
    cls: type[Any]
    fields: list[_Field]
    keys: frozenset[str]


_CODECS: dict[type[Any], _Codec] = {}


def wire_key(name: str) -> str:
    return name[:-1] if name.endswith("_") else name


def _plain(value: Any) -> Any:
    return value


def _unused(value: Any, path: str) -> Any:  # a Flat field decodes through its variants
    return value


def _compile(tp: Any) -> tuple[Decoder, Encoder]:
    """A decoder and an encoder for one annotated type."""
    metadata: tuple[Any, ...] = ()
    if typing.get_origin(tp) is typing.Annotated:
        tp, *rest = typing.get_args(tp)
        metadata = tuple(rest)
    for mark in metadata:
        if isinstance(mark, Text):
            return _text_decoder(mark), _plain
        if isinstance(mark, Int):
            return _int_decoder(mark), _plain
        if isinstance(mark, Tagged):
            return _tagged_codec(mark.key, _variants(tp))
    if tp is str:
        return _text_decoder(Text()), _plain
    if tp is int:
        return _int_decoder(Int()), _plain
    if tp is bool:
        return _bool_decode, _plain
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum_decoder(tp), _plain
    if typing.get_origin(tp) is tuple:
        item_type, ellipsis = typing.get_args(tp)
        assert ellipsis is Ellipsis, "only tuple[X, ...] is supported"
        item_decode, item_encode = _compile(item_type)

        def encode_items(value: Any) -> list[Any]:
            return [item_encode(v) for v in value]

        return _tuple_decoder(item_decode), encode_items
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        codec = codec_of(tp)
        return _object_decoder(codec, None), lambda value: _encode_object(codec, value, None)
    raise TypeError(f"no wire form for {tp!r}")


def _variants(union: Any) -> list[type[Any]]:
    return list(typing.get_args(union))


def _tagged_codec(key: str, classes: list[type[Any]]) -> tuple[Decoder, Encoder]:
    by_tag = {cls.TAG: _object_decoder(codec_of(cls), key) for cls in classes}
    expected = f"one of {', '.join(repr(t) for t in by_tag)}"

    def decode(value: Any, path: str) -> Any:
        if not isinstance(value, Obj):
            raise _wrong(path, "an object", value)
        tags = [v for k, v in value if k == key]
        if not tags:
            raise SchemaError(f"{path}: missing key {key!r}")
        variant = by_tag.get(tags[0]) if type(tags[0]) is str else None
        if variant is None:
            raise _wrong(f"{path}.{key}", expected, tags[0])
        return variant(value, path)

    def encode(value: Any) -> dict[str, Any]:
        return _encode_object(codec_of(type(value)), value, (key, value.TAG))

    return decode, encode


def codec_of(cls: type[Any]) -> _Codec:
    """The compiled codec of a dataclass (compiled on first use, then cached)."""
    codec = _CODECS.get(cls)
    if codec is not None:
        return codec
    hints = typing.get_type_hints(cls, include_extras=True)
    fields: list[_Field] = []
    keys: set[str] = set()
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        optional = f.default is None
        if optional:
            tp = _without_none(tp)
        key = wire_key(f.name)
        flat = _flat_key(tp)
        if flat is not None:
            variants = {v.TAG: codec_of(v) for v in _variants(typing.get_args(tp)[0])}
            fields.append(_Field(f.name, flat, False, _unused, _plain, variants))
            keys.add(flat)
            for variant in variants.values():
                keys.update(variant.keys)
            continue
        decode, encode = _compile(tp)
        fields.append(_Field(f.name, key, optional, decode, encode))
        keys.add(key)
    codec = _Codec(cls, fields, frozenset(keys))
    _CODECS[cls] = codec
    return codec


def _without_none(tp: Any) -> Any:
    """`X | None` (possibly inside Annotated) without the `None`."""
    if typing.get_origin(tp) is typing.Annotated:
        inner, *rest = typing.get_args(tp)
        return typing.Annotated[(_without_none(inner), *rest)]
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
        return typing.Union[tuple(args)]  # noqa: UP007 - built at run time
    return tp


def _flat_key(tp: Any) -> str | None:
    if typing.get_origin(tp) is typing.Annotated:
        for mark in typing.get_args(tp)[1:]:
            if isinstance(mark, Flat):
                return mark.key
    return None


def _pairs(value: Obj, path: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, item in value:
        if key in seen:
            raise SchemaError(f"{path}: key {key!r} given twice")
        seen[key] = item
    return seen


def _object_decoder(codec: _Codec, tag_key: str | None) -> Decoder:
    """Decode an object into `codec.cls`; `tag_key` is a key the caller has already used."""

    def decode(value: Any, path: str) -> Any:
        if not isinstance(value, Obj):
            raise _wrong(path, "an object", value)
        given = _pairs(value, path)
        if tag_key is not None:
            given.pop(tag_key, None)
        return _fill(codec, given, path)

    return decode


def _fill(codec: _Codec, given: dict[str, Any], path: str) -> Any:
    for key in given:
        if key not in codec.keys:
            raise SchemaError(f"{path}: unknown key {key!r}")
    values: dict[str, Any] = {}
    for field in codec.fields:
        if field.flat is not None:
            tag = given.get(field.key)
            variant = field.flat.get(tag) if type(tag) is str else None
            if variant is None:
                if field.key not in given:
                    raise SchemaError(f"{path}: missing key {field.key!r}")
                expected = "one of " + ", ".join(repr(t) for t in field.flat)
                raise _wrong(f"{path}.{field.key}", expected, tag)
            rest = {k: v for k, v in given.items() if k in variant.keys}
            for key in given:
                if key not in variant.keys and key != field.key and not _owned(codec, key):
                    raise SchemaError(f"{path}: key {key!r} does not belong with {tag!r}")
            values[field.name] = _fill(variant, rest, path)
            continue
        if field.key in given:
            values[field.name] = field.decode(given[field.key], f"{path}.{field.key}")
        elif field.optional:
            values[field.name] = None
        else:
            raise SchemaError(f"{path}: missing key {field.key!r}")
    return codec.cls(**values)


def _owned(codec: _Codec, key: str) -> bool:
    return any(f.key == key and f.flat is None for f in codec.fields)


def _encode_object(codec: _Codec, value: Any, tag: tuple[str, str] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if tag is not None:
        out[tag[0]] = tag[1]
    for field in codec.fields:
        item = getattr(value, field.name)
        if field.flat is not None:
            out[field.key] = item.TAG
            out.update(_encode_object(codec_of(type(item)), item, None))
        elif item is not None:
            out[field.key] = field.encode(item)
    return out


def to_json_object(value: Any, tag: tuple[str, str] | None = None) -> dict[str, Any]:
    """The ordered dict a dataclass value is written as (tag first when given)."""
    return _encode_object(codec_of(type(value)), value, tag)


_OBJECT_DECODERS: dict[tuple[type[Any], str | None], Decoder] = {}


def from_json_object(cls: type[Any], value: Any, path: str, tag_key: str | None = None) -> Any:
    """Decode a parsed object (an `Obj`) into `cls`, ignoring the already-used `tag_key`. Its
    decoder is made once (every frame a daemon receives comes this way)."""
    decode = _OBJECT_DECODERS.get((cls, tag_key))
    if decode is None:
        decode = _OBJECT_DECODERS[cls, tag_key] = _object_decoder(codec_of(cls), tag_key)
    return decode(value, path)
