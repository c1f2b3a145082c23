"""Strict JSON for what someone else wrote (a model's MCP arguments, an MCP server's lines): one
value, no key given twice, no NaN or Infinity. Pure: text in, a value or `StrictJsonError` out.
"""

from __future__ import annotations

import json
from typing import Any

MAX_SHOWN = 100  # characters of a duplicated key shown in the reason


class StrictJsonError(ValueError):
    """Not strict JSON; `str()` is one line of why (a key shown only if printable)."""


def loads(text: str | bytes) -> Any:
    """The one JSON value in `text`; `StrictJsonError` for anything else (bytes that are not
    UTF-8, nesting deeper than the parser goes)."""
    try:
        return json.loads(text, object_pairs_hook=_no_twice, parse_constant=_no_constant)
    except StrictJsonError:
        raise
    except ValueError as error:  # JSONDecodeError, and text that is not UTF-8
        raise StrictJsonError(str(error)) from None
    except RecursionError:
        raise StrictJsonError("the value is nested too deeply") from None


def _no_twice(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            shown = key if key.isprintable() and len(key) <= MAX_SHOWN else "…"
            raise StrictJsonError(f"duplicate field `{shown}`")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise StrictJsonError(f"{name} is not a JSON value")
