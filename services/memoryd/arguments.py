"""The memory tool's canonical arguments (SPEC §4.2, §8.1), read strictly on memoryd's side.

brokerd sends `canonical_json()` (the tag, then the fields in order, compact, not ASCII-escaped);
memoryd may not import brokerd, so it reads that form here and refuses anything else, even
equivalent JSON: a difference means misuse. Pure: no I/O, no clock.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from bxcore import strict_json

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


_DECODER = strict_json.Decoder(max_digits=len(str(I64_MAX)))


def _shown(value: object) -> str:
    """A short, one-line rendering of a value the model wrote."""
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 40 else text[:39] + "…"


def parse(arguments: str) -> Action:
    """`arguments` as one memory action; raises `ArgumentsError` only."""
    try:
        value, end = _DECODER.first(arguments)
    except strict_json.Twice as error:
        raise ArgumentsError(f"duplicate field {error.key!r}") from None
    except strict_json.OutOfRange:
        raise ArgumentsError("id is out of range (64-bit signed)") from None
    except strict_json.TooDeep:
        raise ArgumentsError("nested too deeply") from None
    except strict_json.Syntax as error:
        raise ArgumentsError(f"not JSON: {error}") from None
    except strict_json.StrictJsonError as error:  # NaN, Infinity
        raise ArgumentsError(str(error)) from None
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
