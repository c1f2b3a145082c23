"""The memory tool's canonical arguments (SPEC §4.2, §8.1), read strictly on memoryd's side.

brokerd sends `canonical_json()` (the tag, then the fields in order, compact, not ASCII-escaped);
memoryd may not import brokerd, so it reads that form here and refuses anything else, even
equivalent JSON: a difference means misuse. Pure: no I/O, no clock.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

I64_MIN = -(2**63)
I64_MAX = 2**63 - 1


class ArgumentsError(Exception):
    """Why the arguments are not canonical memory arguments, in one line."""


@dataclass(frozen=True, slots=True)
class Note:
    text: str


@dataclass(frozen=True, slots=True)
class Recall:
    query: str


@dataclass(frozen=True, slots=True)
class Forget:
    id: int


Action = Note | Recall | Forget

_FIELDS: dict[str, tuple[str, type]] = {
    "note": ("text", str),
    "recall": ("query", str),
    "forget": ("id", int),
}


def _refuse_constant(name: str) -> object:
    raise ArgumentsError(f"{name} is not a JSON value")


def _pairs(pairs: list[tuple[str, object]]) -> dict[str, object]:
    found: dict[str, object] = {}
    for key, value in pairs:
        if key in found:
            raise ArgumentsError(f"duplicate field {key!r}")
        found[key] = value
    return found


def _integer(digits: str) -> int:
    if len(digits.lstrip("-")) > len(str(I64_MAX)):  # before int(): Python limits its digits
        raise ArgumentsError("id is out of range (64-bit signed)")
    return int(digits)


_DECODER = json.JSONDecoder(
    object_pairs_hook=_pairs, parse_constant=_refuse_constant, parse_int=_integer
)


def _shown(value: object) -> str:
    """A short, one-line rendering of a value the model wrote."""
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 40 else text[:39] + "…"


def parse(arguments: str) -> Action:
    """`arguments` as one memory action; raises `ArgumentsError` only."""
    try:
        value, end = _DECODER.raw_decode(arguments)
    except RecursionError:
        raise ArgumentsError("nested too deeply") from None
    except json.JSONDecodeError as error:
        raise ArgumentsError(f"not JSON: {error}") from None
    if end != len(arguments):
        raise ArgumentsError(f"text after the JSON object at character {end}")
    if not isinstance(value, dict):
        raise ArgumentsError("not a JSON object")
    action = value.get("action")
    if not isinstance(action, str) or action not in _FIELDS:
        raise ArgumentsError(f"unknown action {_shown(action)}")
    name, kind = _FIELDS[action]
    if list(value) != ["action", name]:
        raise ArgumentsError(f"{action} takes exactly the fields action and {name}, in that order")
    field = value[name]
    if type(field) is not kind:  # bool is an int to isinstance, not to memoryd
        raise ArgumentsError(f"{name} must be a JSON {'string' if kind is str else 'integer'}")
    if json.dumps(value, separators=(",", ":"), ensure_ascii=False) != arguments:
        raise ArgumentsError("not in canonical form")  # whitespace, escapes, a lone surrogate…
    if isinstance(field, int):
        if not I64_MIN <= field <= I64_MAX:
            raise ArgumentsError("id is out of range (64-bit signed)")
        return Forget(field)
    assert isinstance(field, str)
    return Note(field) if action == "note" else Recall(field)
