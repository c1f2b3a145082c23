"""Tool arguments (SPEC §4): the model's argument string turned into a typed `ToolArgs`.

It owns `parse`, the `ArgsError` a refusal carries and its one-line detail, and the form checks
for paths, hosts and URLs. It knows nothing about grants. Everything it reads was written by the
model and is treated as hostile. Pure: no I/O, no clock.
"""

from __future__ import annotations

import enum
import json
import re
from json.encoder import encode_basestring as _quoted

from bxcore.frozen import frozen
from bxcore.ids import byte_length_between
from bxcore.tools import BROKERED, Kind, ToolName
from services.brokerd.core.argshape import ShapeError, Value, decode, fields_of

__all__ = [
    "MAX_ARGUMENTS",
    "MAX_DETAIL",
    "MAX_PATH",
    "MAX_URL",
    "ArgsError",
    "ArgsErrorKind",
    "ToolArgs",
    "ToolName",
    "Value",
    "host_matches",
    "inside",
    "parse",
    "url_host",
    "valid_host",
    "valid_host_pattern",
    "valid_path",
]

MAX_PATH = 4096  # bytes of UTF-8
MAX_URL = 2048  # bytes
MAX_DETAIL = 300  # characters, not bytes
MAX_ARGUMENTS = 2 * 1024 * 1024  # bytes of UTF-8

_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")  # 1 to 63, no `-` at either end
_HOST_RUN = re.compile(r"[a-z0-9.-]*")
_URL_REST = re.compile(r"(?:/[\x21-\x7e]*)?")  # empty, or `/` and printable ASCII, no space
_NOT_A_NAME = frozenset(("", ".", ".."))  # path components refused: empty, `.`, `..`

# Unicode category Cc (U+0000-U+001F, U+007F-U+009F), and the line and paragraph separators.
_ONE_LINE = {code: " " for code in (*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029)}


class ArgsErrorKind(enum.StrEnum):
    SHAPE = "shape"
    PATH = "path"
    URL = "url"


_PREFIX = {
    ArgsErrorKind.SHAPE: "invalid argument shape: ",
    ArgsErrorKind.PATH: "invalid path: ",
    ArgsErrorKind.URL: "invalid url: ",
}


class ArgsError(Exception):
    """Why the arguments are refused. `subject` is the reason (shape), or the path or URL."""

    def __init__(self, kind: ArgsErrorKind, subject: str) -> None:
        self.kind = kind
        self.subject = subject
        if kind is ArgsErrorKind.SHAPE:
            text = _PREFIX[kind] + subject
        else:
            text = _PREFIX[kind] + json.dumps(subject, ensure_ascii=False)
        super().__init__(text)

    @classmethod
    def shape(cls, why: str) -> ArgsError:
        return cls(ArgsErrorKind.SHAPE, why)

    @classmethod
    def path(cls, path: str) -> ArgsError:
        return cls(ArgsErrorKind.PATH, path)

    @classmethod
    def url(cls, url: str) -> ArgsError:
        return cls(ArgsErrorKind.URL, url)

    def detail(self) -> str:
        """What the model is shown (§4.3): `str(self)` on one line, cut to `MAX_DETAIL` characters.

        It holds the model's own arguments, which may be long or hold newlines."""
        return str(self)[:MAX_DETAIL].translate(_ONE_LINE)  # one character for one: cut first


@frozen
class ToolArgs:
    """A call's arguments once parsed: the tool, its field values in declared order (an absent
    optional field left out), and for a tagged tool the tag's name and value (`variant`).

    `host` is what `url_host` gave for the URL field: kept for matching, never written out."""

    tool: str
    values: tuple[tuple[str, Value], ...]
    tag: str | None = None
    variant: str | None = None
    host: str | None = None

    def get(self, name: str) -> Value | None:
        """The value of field `name`, or None when it is absent (or not a field of this call)."""
        for field, value in self.values:
            if field == name:
                return value
        return None

    @property
    def path(self) -> str | None:
        return self._text("path")

    @property
    def cwd(self) -> str | None:
        return self._text("cwd")

    @property
    def url(self) -> str | None:
        return self._text("url")

    def _text(self, name: str) -> str | None:
        value = self.get(name)
        return value if isinstance(value, str) else None

    def canonical_json(self) -> str:
        """The same arguments re-encoded (§4.2): the tag first, then the fields in declared order,
        compact, not escaped to ASCII; the host never written. Every value is a string or an
        integer, so the object is written pair by pair with the string encoder `json` itself
        uses: what `json.dumps(..., separators=(",", ":"), ensure_ascii=False)` writes, at half
        its cost (every decision records it)."""
        pairs: list[tuple[str, Value]] = []
        if self.tag is not None and self.variant is not None:
            pairs.append((self.tag, self.variant))
        pairs.extend(self.values)
        written = []
        for name, value in pairs:
            text = _quoted(value) if isinstance(value, str) else int.__repr__(value)
            written.append(f"{_quoted(name)}:{text}")
        return "{" + ",".join(written) + "}"


def parse(tool: str, arguments: str) -> ToolArgs:
    """The model's `arguments` for `tool`, checked as §4.2 says; raises `ArgsError` only.

    `tool` must name a brokered tool (`bxcore.tools.BROKERED`): the caller refuses an unknown
    name as `unknown_tool` before it parses, so any other name is a bug there (`ValueError`)."""
    spec = BROKERED.get(tool)
    if spec is None:
        raise ValueError(f"not a brokered tool: {tool!r}")
    if _too_large(arguments):
        raise ArgsError.shape(f"the arguments are larger than {MAX_ARGUMENTS} bytes")
    try:
        decoded = decode(spec, arguments)
    except ShapeError as error:
        raise ArgsError.shape(str(error)) from None
    fields = fields_of(spec, decoded.variant)
    values = dict(decoded.values)
    for field in fields:
        path = values.get(field.name)
        if field.kind is Kind.PATH and isinstance(path, str) and not valid_path(path):
            raise ArgsError.path(path)
    host: str | None = None
    for field in fields:
        url = values.get(field.name)
        if field.kind is Kind.URL and isinstance(url, str):
            found = url_host(url)
            if found is None:
                raise ArgsError.url(url)
            host = host or found  # a tool with two URL fields keeps the first one's host
    return ToolArgs(spec.name, decoded.values, spec.tag, decoded.variant, host)


def _too_large(arguments: str) -> bool:
    if len(arguments) > MAX_ARGUMENTS:  # each character is at least one byte
        return True
    try:
        return len(arguments.encode("utf-8")) > MAX_ARGUMENTS
    except UnicodeEncodeError:  # a lone surrogate: not text the wire could have carried
        raise ArgsError.shape("the arguments are not valid UTF-8") from None


def valid_path(path: str) -> bool:
    """At most `MAX_PATH` bytes, no NUL, absolute, and no empty, `.` or `..` component: a path
    that would need normalising is refused, never normalised. `/` alone is valid."""
    if not byte_length_between(path, 1, MAX_PATH) or "\0" in path or not path.startswith("/"):
        return False
    if path == "/":
        return True
    return _NOT_A_NAME.isdisjoint(path[1:].split("/"))


def inside(grant_path: str, path: str) -> bool:
    """`path` is `grant_path` or under it, by whole components (`/a/bc` is not inside `/a/b`)."""
    if not path.startswith(grant_path):
        return False
    rest = path[len(grant_path) :]
    return grant_path == "/" or rest == "" or rest.startswith("/")


def valid_host(host: str) -> bool:
    """1 to 253 bytes; two labels or more of 1 to 63 bytes of `a-z 0-9 -`, no `-` at either
    end; the last label starts with a letter, which keeps out every spelling of an IPv4 address."""
    if not byte_length_between(host, 1, 253):
        return False
    labels = host.split(".")
    if len(labels) < 2 or not all(_LABEL.fullmatch(label) for label in labels):
        return False
    return "a" <= labels[-1][0] <= "z"


def valid_host_pattern(pattern: str) -> bool:
    """A valid host, or `*.` and a valid host."""
    return valid_host(pattern) or (pattern.startswith("*.") and valid_host(pattern[2:]))


def host_matches(pattern: str, host: str) -> bool:
    """Without `*.`, equal strings; `*.base` matches a host that ends with `.base` and has
    something before that dot (not `base` itself)."""
    if not pattern.startswith("*."):
        return pattern == host
    suffix = pattern[1:]  # `.base`
    return host.endswith(suffix) and len(host) > len(suffix)


def url_host(url: str) -> str | None:
    """The host of an `https://` URL of the one form §4.4 allows, or None. The host is the longest
    run of `a-z 0-9 . -`, so userinfo, `[::1]`, uppercase, `?` or `#` straight after it fail."""
    if not byte_length_between(url, 0, MAX_URL) or not url.startswith("https://"):
        return None
    rest = url[len("https://") :]
    host = _HOST_RUN.match(rest)
    if host is None or not valid_host(host.group()):
        return None
    rest = rest[host.end() :]
    if rest.startswith(":443"):
        rest = rest[len(":443") :]
    return host.group() if _URL_REST.fullmatch(rest) else None
