"""The one strict JSON decoder for what someone else wrote (a frame on a socket, a model's
arguments, an MCP server's lines, a model server's answers, a ledger line read back): no NaN or
Infinity, UTF-8 only, deep nesting refused, and by default one value with no key given twice.

A caller that must word a refusal its own way (a wire `bad_message`, serde's words for a tool's
arguments) catches the subclass of `StrictJsonError` it words; the refusals themselves live only
here. `Decoder` holds the few choices callers differ on: objects as their pairs (a key twice
kept, for the caller to refuse in its own order), numbers as written, a bound on digits, on
depth, no float past the largest, no lone surrogate. The toolkit, held to the standard library
inside the sandbox, keeps its own copy (`services/toolkit/input.py`), checked against this one
by tests/unit/toolkit/test_input_agrees.py. Pure: text in, a value or `StrictJsonError` out.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

MAX_SHOWN = 100  # characters of a duplicated key shown in the reason

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # may be a lone surrogate: look closer
_SURROGATE = re.compile(r"[\ud800-\udfff]")  # json joins pairs, so any left is lone


class StrictJsonError(ValueError):
    """Not strict JSON; `str()` is one line of why (a key shown only if printable)."""


class NotUtf8(StrictJsonError):
    """Bytes that are not UTF-8; `start` is the first bad byte's offset."""

    def __init__(self, error: UnicodeDecodeError) -> None:
        super().__init__(str(error))
        self.start = error.start


class Syntax(StrictJsonError):
    """Not JSON's grammar (text after the value included); `error` is json's own."""

    def __init__(self, error: json.JSONDecodeError) -> None:
        super().__init__(str(error))
        self.error = error


class NotAValue(StrictJsonError):
    """`NaN`, `Infinity` or `-Infinity`, which JSON does not have; `name` is which."""

    def __init__(self, name: str) -> None:
        super().__init__(f"{name} is not a JSON value")
        self.name = name


class Twice(StrictJsonError):
    """An object gives `key` twice."""

    def __init__(self, key: str) -> None:
        shown = key if key.isprintable() and len(key) <= MAX_SHOWN else "…"
        super().__init__(f"duplicate field `{shown}`")
        self.key = key


class TooDeep(StrictJsonError):
    """Nested deeper than the parser goes, or than the decoder's `max_depth`."""

    def __init__(self) -> None:
        super().__init__("the value is nested too deeply")


class OutOfRange(StrictJsonError):
    """A number with more digits than allowed, or a float past the largest."""


class LoneSurrogate(StrictJsonError):
    """A `\\uD800`-like escape with no partner, where the decoder refuses one."""

    def __init__(self) -> None:
        super().__init__("lone surrogate in hex escape")


class Pairs(list[tuple[str, Any]]):
    """A JSON object as its key/value pairs in document order, a key given twice kept."""


class Number(str):
    """A number as written (`1e+16`, `12345678901234567890`), never converted."""


class Decoder:
    """Strict JSON with a caller's choices; every refusal a `StrictJsonError`."""

    def __init__(
        self,
        *,
        pairs: bool = False,
        as_written: bool = False,
        max_digits: int | None = None,
        finite: bool = False,
        surrogates: bool = True,
        max_depth: int | None = None,
    ) -> None:
        """`pairs`: objects as `Pairs` (a key twice kept) instead of dicts (a key twice
        refused); `as_written`: numbers as `Number`; `max_digits`: digits of an integer, its sign
        not counted; `finite`: a float past the largest (`1e400`) refused, not made infinite;
        `surrogates`: a lone surrogate escape allowed (as json allows it); `max_depth`: arrays
        and objects nested at most this deep."""
        hooks: dict[str, Any] = {
            "object_pairs_hook": Pairs if pairs else _no_twice,
            "parse_constant": _no_constant,
        }
        if as_written:
            hooks["parse_int"] = hooks["parse_float"] = Number
        if max_digits is not None and not as_written:
            hooks["parse_int"] = _bounded_int(max_digits)
        if finite and not as_written:
            hooks["parse_float"] = _finite_float
        self._json = json.JSONDecoder(**hooks)
        self._surrogates = surrogates
        self._max_depth = max_depth
        self._checks = not surrogates or max_depth is not None  # after the parse; most have none

    def loads(self, text: str | bytes) -> Any:
        """The one JSON value in `text` (whitespace around it allowed)."""
        if isinstance(text, bytes):
            text = _utf8(text)
        value = _refusing(self._json.decode, text)
        if self._checks:
            self._check(text, value)
        return value

    def first(self, text: str, start: int = 0) -> tuple[Any, int]:
        """The JSON value starting at `start` (no whitespace skipped) and where it ends; what
        follows is the caller's to judge."""
        value, end = _refusing(self._json.raw_decode, text, start)
        if self._checks:
            self._check(text, value)
        return value, end

    def _check(self, text: str, value: object) -> None:
        if not self._surrogates and _SURROGATE_ESCAPE.search(text) and _has_lone_surrogate(value):
            raise LoneSurrogate()
        if self._max_depth is not None and depth(value) > self._max_depth:
            raise TooDeep()


def _refusing(decode: Callable[..., Any], *args: Any) -> Any:
    """`decode(*args)`, anything json or Python raise made a `StrictJsonError`."""
    try:
        return decode(*args)
    except StrictJsonError:
        raise
    except json.JSONDecodeError as error:
        raise Syntax(error) from None
    except ValueError as error:  # an integer longer than Python converts
        raise OutOfRange(str(error).splitlines()[0]) from None
    except RecursionError:
        raise TooDeep() from None


def depth(value: object) -> int:
    """How deep arrays and objects nest in `value` (a scalar: 0), without recursion."""
    most = 0
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            items: Any = item.values()
        elif isinstance(item, Pairs):
            items = (inner for _, inner in item)
        elif isinstance(item, list):
            items = item
        else:
            continue
        most = max(most, level + 1)
        stack.extend((inner, level + 1) for inner in items)
    return most


def _utf8(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise NotUtf8(error) from None


def _no_twice(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise Twice(key)
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise NotAValue(name)


def _bounded_int(most: int) -> Callable[[str], int]:
    def parse(digits: str) -> int:
        if len(digits.lstrip("-")) > most:  # before int(): Python limits its digits
            raise OutOfRange("number out of range")
        return int(digits)

    return parse


def _finite_float(text: str) -> float:
    number = float(text)
    if math.isinf(number):
        raise OutOfRange("number out of range")
    return number


def _has_lone_surrogate(value: object) -> bool:
    """Walks every key and string without recursion: the value may be nested deep."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            for key, inner in item.items():
                stack.append(key)
                stack.append(inner)
        elif isinstance(item, Pairs):
            for key, inner in item:
                stack.append(key)
                stack.append(inner)
        elif isinstance(item, list):
            stack.extend(item)
    return False


_DEFAULT = Decoder()


def loads(text: str | bytes) -> Any:
    """The one JSON value in `text`, no key given twice; `StrictJsonError` for anything else."""
    return _DEFAULT.loads(text)
