"""Reading the arguments from standard input and parsing them strictly (SPEC §8.3).

At most 2 MiB of UTF-8, one JSON object holding exactly the tool's fields, every value a string.
No I/O beyond the stream it is given. It avoids `json` itself on the success path (the module
pulls in `re` and `enum`, which would double the start-up time of `read_file`): the plain
object brokerd sends for most calls is read by hand, anything else by CPython's C scanner
`_json`, and `json` is imported only to word an error.

This is the box's one copy of a strict JSON decoder outside `bxcore.strict_json`: the toolkit
runs alone in the sandbox, held to the standard library (tests/unit/test_imports.py), so it
cannot import bxcore. It refuses what that one refuses (NaN, Infinity, a key twice, nesting past
the parser, bytes that are not UTF-8), in serde's words; tests/unit/toolkit/test_input_agrees.py
feeds both the same hostile texts and holds them to the same answers.
"""

MAX_INPUT = 2 * 1024 * 1024
MAX_WHY = 300  # characters of a reason shown on stderr, like brokerd's MAX_DETAIL

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import BinaryIO

# (name, required) for each field, in the order SPEC §4.1 declares them.
Fields = tuple[tuple[str, bool], ...]

_SPACE = " \t\n\r"  # JSON's whitespace
_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


class InputError(Exception):
    """The arguments could not be read; `str()` is the reason after `toolkit: `."""


class ArgumentsError(Exception):
    """The arguments do not parse; `str()` is the reason, worded like serde's where it can be."""


def read_input(stdin: "BinaryIO | None") -> str:
    """All of `stdin` as text: at most MAX_INPUT bytes of UTF-8, reading at most MAX_INPUT + 1."""
    if stdin is None:  # standard input is closed: there are no arguments
        return ""
    try:
        data = stdin.read(MAX_INPUT + 1)
    except OSError as error:
        raise InputError(f"cannot read the arguments: {error.strerror or error}") from None
    if len(data) > MAX_INPUT:
        raise InputError(f"the arguments are larger than {MAX_INPUT} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError("the arguments are not UTF-8") from None


def parse_arguments(text: str, fields: Fields) -> dict[str, str]:
    """The fields of the one JSON object in `text`; raises ArgumentsError for anything else."""
    try:
        value = _decode(text)
    except RecursionError:
        raise ArgumentsError("recursion limit exceeded") from None
    except ValueError as error:
        raise ArgumentsError(one_line(str(error))) from None
    return _fields(value, fields)


def one_line(text: str) -> str:
    """`text` fit for one line of stderr: controls become spaces, lone surrogates `\\uXXXX`,
    and at most MAX_WHY characters are kept."""
    out = []
    for char in text[: MAX_WHY + 1]:
        if _surrogate(char):
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(" " if _control(char) else char)
    line = "".join(out)
    return line if len(line) <= MAX_WHY else line[: MAX_WHY - 1] + "…"


def quoted(text: str, limit: int = 100) -> str:
    """`text` in double quotes, escaped like a JSON string so that it stays on one line."""
    out = ['"']
    for char in text[:limit]:
        if char in '"\\':
            out.append("\\" + char)
        elif char in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[char])
        elif _control(char) or _surrogate(char):
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    out.append('"' if len(text) <= limit else '"…')
    return "".join(out)


def _control(char: str) -> bool:
    """C0, DEL, C1, and the Unicode line and paragraph separators."""
    code = ord(char)
    return code < 0x20 or 0x7F <= code <= 0x9F or code in (0x2028, 0x2029)


def _surrogate(char: str) -> bool:
    return 0xD800 <= ord(char) <= 0xDFFF


def _fields(value: object, fields: Fields) -> dict[str, str]:
    if not isinstance(value, tuple):
        raise ArgumentsError(f"invalid type: {_kind(value)}, expected an object")
    names = [name for name, _ in fields]
    found: dict[str, str] = {}
    for key, item in value:
        if key not in names:
            raise ArgumentsError(one_line(f"unknown field `{key}`, expected {_expected(names)}"))
        if key in found:
            raise ArgumentsError(f"duplicate field `{key}`")
        if not isinstance(item, str):
            raise ArgumentsError(one_line(f"invalid type: {_shown(item)}, expected a string"))
        try:
            item.encode("utf-8")
        except UnicodeEncodeError:
            raise ArgumentsError(f"invalid value: field `{key}` holds a lone surrogate") from None
        found[key] = item
    for name, required in fields:
        if required and name not in found:
            raise ArgumentsError(f"missing field `{name}`")
    return found


def _expected(names: list[str]) -> str:
    quoted = [f"`{name}`" for name in names]
    if len(quoted) == 1:
        return quoted[0]
    if len(quoted) == 2:
        return f"{quoted[0]} or {quoted[1]}"
    return "one of " + ", ".join(quoted)


def _kind(value: object) -> str:
    """The JSON type's name (SPEC §4.2: null, boolean, integer, number, string, array)."""
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
    if isinstance(value, list):
        return "array"
    return "object"


def _shown(value: object) -> str:
    """The type with its value where serde shows one: integer `3`, boolean `true`."""
    if isinstance(value, bool):
        return f"boolean `{'true' if value else 'false'}`"
    if isinstance(value, int | float):
        return f"{_kind(value)} `{value!r:.40}`"
    return _kind(value)


def _reject_constant(name: str) -> object:
    raise ArgumentsError(f"invalid number `{name}`")


class _Strict:
    """The settings `_json.make_scanner` reads: strict strings, objects as tuples of pairs
    (so that duplicates can be seen and arrays told apart), no NaN or Infinity."""

    strict = True
    object_hook = None
    object_pairs_hook = tuple
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_reject_constant)


def _scan_fast(text: str) -> object | None:
    """The value in `text` through the C scanner, or None when it cannot say (no `_json`, or
    a syntax error, which `json` will word)."""
    try:
        import _json
    except ImportError:
        return None
    scan = _json.make_scanner(_Strict())  # type: ignore[arg-type]
    start = len(text) - len(text.lstrip(_SPACE))
    try:
        value, end = scan(text, start)
    except ArgumentsError:
        raise
    except Exception:
        # A syntax error, which `json` words. (This scanner cannot word one itself unless
        # `json.decoder` is already imported; it fails with a SystemError instead.)
        return None
    if text[end:].strip(_SPACE):
        return None
    return value  # type: ignore[no-any-return]


def _plain_object(text: str) -> tuple[tuple[str, str], ...] | None:
    """The pairs of `{"name":"value",...}` when no string in it holds an escape or a
    character that is not printable, or None for anything else (the scanners decide then).

    It is the form brokerd sends (canonical, compact) for most calls, `read_file` above all,
    and it is read without loading `_json` (a shared library: about 0.2 ms of a sandbox's
    start). Without a backslash, every `"` in valid JSON ends or starts a string, so splitting
    on them is exact; anything it is not sure of, it leaves to the strict parser."""
    if len(text) < 7 or text[:2] != '{"' or text[-2:] != '"}' or "\\" in text:
        return None
    pairs = []
    for pair in text[2:-2].split('","'):
        name, colon, value = pair.partition('":"')
        # isprintable() is false for every control character (and for some characters JSON
        # allows raw, which the strict parser then reads instead).
        if not colon or '"' in name or '"' in value:
            return None
        if not (name.isprintable() and value.isprintable()):
            return None
        pairs.append((name, value))
    return tuple(pairs)


def _decode(text: str) -> object:
    pairs = _plain_object(text)
    if pairs is not None:
        return pairs
    value = _scan_fast(text)
    if value is not None:
        return value
    import json  # the slow path: only to word an error (or if `_json` is missing)

    return json.loads(text, object_pairs_hook=tuple, parse_constant=_reject_constant)
