"""The wire codec (SPEC §3.1): one frame, one UTF-8 JSON object, `"type"` first.

`decode` is strict at every depth and raises only `DecodeError`, which carries the request id
when one could be read so the receiver can answer `bad_message`. `encode` is canonical:
compact, `ensure_ascii=False`, declared field order, `None` left out, so
`encode(decode(b)) == b` for every canonical `b`. Pure: no I/O.
"""

from __future__ import annotations

import json
from typing import Any

from bxcore import strict_json
from bxcore.ids import MAX_REQUEST_ID, byte_length_between
from bxcore.wire import messages
from bxcore.wire.messages import *  # noqa: F403 - the message types are part of this module's API
from bxcore.wire.schema import Obj, SchemaError, codec_of, from_json_object, to_json_object

MAX_MESSAGE = 4 * 1024 * 1024

Message = Any  # one of the dataclasses of `bxcore.wire.messages` that has a TYPE

TYPES: dict[str, type[Any]] = {
    cls.__dict__["TYPE"]: cls
    for cls in vars(messages).values()
    if isinstance(cls, type) and "TYPE" in getattr(cls, "__dict__", {})
}
for _cls in TYPES.values():  # compile every codec now, not on a first request
    codec_of(_cls)


class DecodeError(ValueError):
    """A frame that is not a valid message; `id` is its request id when one could be read."""

    def __init__(self, message: str, id: str | None = None) -> None:
        super().__init__(message)
        self.id = id


_decoder = strict_json.Decoder(pairs=True)  # a key twice is the schema's to refuse
_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False)


def parse_json(data: bytes) -> Any:
    """Bytes to a JSON value whose objects are `Obj` pairs; raises ValueError with one line."""
    if len(data) > MAX_MESSAGE:
        raise ValueError(f"the message is larger than {MAX_MESSAGE} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"the message is not UTF-8 (byte {error.start})") from None
    try:
        value, end = _decoder.first(text)
    except strict_json.NotAValue as error:
        raise ValueError(f"{error.name} is not valid JSON") from None
    except strict_json.TooDeep:
        raise ValueError("the message is nested too deeply") from None
    except strict_json.OutOfRange as error:  # an integer longer than Python converts
        raise ValueError(str(error)) from None
    except strict_json.StrictJsonError as error:
        raise ValueError(f"not JSON: {error}") from None
    if end != len(text):
        raise ValueError(f"not JSON: Extra data after the value at char {end}")
    return value


def _request_id(pairs: Obj) -> str | None:
    for key, value in pairs:
        if key == "id" and type(value) is str and byte_length_between(value, 1, MAX_REQUEST_ID):
            return value
    return None


def decode(data: bytes) -> Message:
    """One frame to a message, or `DecodeError`."""
    try:
        value = parse_json(data)
    except ValueError as error:
        raise DecodeError(str(error)) from None
    if not isinstance(value, Obj):
        raise DecodeError("the message is not a JSON object")
    request_id = _request_id(value)
    types = [v for k, v in value if k == "type"]
    if not types:
        raise DecodeError('the message has no "type"', request_id)
    kind = types[0]
    cls = TYPES.get(kind) if type(kind) is str else None
    if cls is None:
        shown = kind if type(kind) is str and len(kind) <= 40 else "…"
        raise DecodeError(f"unknown message type {shown!r}", request_id)
    try:
        return from_json_object(cls, value, kind, tag_key="type")
    except SchemaError as error:
        raise DecodeError(str(error), request_id) from None
    except RecursionError:
        raise DecodeError("the message is nested too deeply", request_id) from None


def encode(message: Message) -> bytes:
    """A message to its one canonical frame."""
    obj = to_json_object(message, ("type", message.TYPE))
    return _encoder.encode(obj).encode("utf-8")


def dump_json(value: Any) -> str:
    """Any JSON value in the canonical form (compact, `ensure_ascii=False`)."""
    return _encoder.encode(value)
