"""What the model reads of an HTTP response (SPEC §8.3). Pure: no I/O.

    HTTP/1.1 200 OK
    Content-Type: text/html; charset=utf-8
    <blank line>
    the body as text, or [binary body: 12345 bytes of image/png], or [empty body],
    or redirect (301) to https://host/new: fetch that URL to follow it

A text body that was cut ends with a line `[body cut at 1048576 bytes; ...]`.
"""

from __future__ import annotations

import codecs
import contextlib

from .http1 import Response

_TEXT_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/javascript",
        "application/ecmascript",
        "application/x-javascript",
        "application/x-www-form-urlencoded",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/sql",
        "application/graphql",
        "application/x-sh",
        "application/x-ndjson",
        "application/csv",
        "message/rfc822",
        "image/svg+xml",
    }
)
_TEXT_SUFFIXES = ("+json", "+xml", "+yaml")


def render(url: str, response: Response, limit: int) -> str:
    """The model's view of `response` to a GET of `url`; `limit` is how much body was kept."""
    content_type = response.header("content-type")
    media, charset = _media_type(content_type)
    head = (
        f"{_printable(response.status_line)}\n"
        f"Content-Type: {_printable(content_type) if content_type is not None else '(none)'}\n"
        "\n"
    )
    location = response.header("location")
    if 300 <= response.code < 400 and location is not None and location.strip():
        target = _absolute(url, _printable(location).strip())
        return head + f"redirect ({response.code}) to {target}: fetch that URL to follow it"
    if not response.body and not response.cut:
        return head + "[empty body]"
    text = _text(response, media, charset)
    if text is None:
        return head + f"[binary body: {_size(response, limit)} bytes of {media or 'unknown type'}]"
    if response.cut:
        has = (
            f"the body has {response.length} bytes"
            if response.length is not None
            else "the body is longer"
        )
        if text and not text.endswith("\n"):
            text += "\n"
        text += f"[body cut at {limit} bytes; {has}]"
    return head + text


def is_text(media: str) -> bool:
    """Whether a media type (lowercase, no parameters) is text the model can read."""
    return media.startswith("text/") or media in _TEXT_TYPES or media.endswith(_TEXT_SUFFIXES)


def _text(response: Response, media: str | None, charset: str | None) -> str | None:
    """The body decoded, or None when it is not text."""
    if media is None:  # no type given: text only if it is plainly UTF-8
        if b"\0" in response.body:
            return None
        try:
            return _decode(response.body, "utf-8", "strict", response.cut)
        except UnicodeDecodeError:
            return None
    if not is_text(media):
        return None
    encoding = "utf-8"
    if charset:
        with contextlib.suppress(LookupError):  # an unknown charset: read it as UTF-8
            encoding = codecs.lookup(charset).name
    return _decode(response.body, encoding, "replace", response.cut)


def _decode(data: bytes, encoding: str, errors: str, cut: bool) -> str:
    """`data` as text; when it was cut, a character split by the cut is dropped."""
    return codecs.getincrementaldecoder(encoding)(errors).decode(data, final=not cut)


def _media_type(content_type: str | None) -> tuple[str | None, str | None]:
    """(`type/subtype` in lowercase, the charset parameter), either None when absent."""
    if content_type is None:
        return None, None
    media, *params = content_type.split(";")
    charset = None
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset":
            charset = value.strip().strip('"').strip() or None
    return media.strip().lower() or None, charset


def _size(response: Response, limit: int) -> str:
    if response.length is not None:
        return str(response.length)
    return f"more than {limit}" if response.cut else str(len(response.body))


def _absolute(url: str, location: str) -> str:
    from urllib.parse import urljoin

    try:
        return urljoin(url, location)
    except ValueError:
        return location


def _printable(value: str) -> str:
    """A header value (Latin-1 as read) shown as UTF-8 where it is, controls as spaces."""
    with contextlib.suppress(UnicodeEncodeError, UnicodeDecodeError):
        value = value.encode("latin-1").decode("utf-8")
    shown = "".join(" " if ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F else c for c in value)
    return shown if len(shown) <= 2048 else shown[:2047] + "…"
