"""HTTP/1.1 without a socket: the GET request's bytes, and a response read from a `recv`.

Pure apart from the `recv(n) -> bytes` it is given (b"" at the end), so tests can replay
bytes. Handles interim 1xx responses, Content-Length, chunked and close-delimited bodies, and
keeps at most `limit` bytes of a body, saying whether it was cut.
"""

from __future__ import annotations

from collections.abc import Callable

MAX_HEAD = 64 * 1024  # the status line and headers together
MAX_LINE = 8 * 1024  # one chunk-size or trailer line
USER_AGENT = "boxmaker-toolkit"
_HEX_DIGITS = b"0123456789abcdefABCDEF"

Recv = Callable[[int], bytes]


class ResponseError(Exception):
    """The response is not HTTP/1.x as it should be; `str()` says what is wrong."""


class Truncated(ResponseError):
    """The connection ended before the response did."""


class Response:
    """A response's status, headers (names in lowercase, values as Latin-1) and its body,
    of which at most `limit` bytes were kept."""

    __slots__ = ("body", "code", "cut", "headers", "length", "status_line")

    def __init__(
        self,
        status_line: str,
        code: int,
        headers: list[tuple[str, str]],
        body: bytes,
        cut: bool,
        length: int | None,
    ) -> None:
        self.status_line = status_line
        self.code = code
        self.headers = headers
        self.body = body
        self.cut = cut  # more than the kept bytes were sent
        self.length = length  # the whole body's length, when the response said it

    def header(self, name: str) -> str | None:
        """The last value of header `name` (lowercase), or None."""
        found = None
        for key, value in self.headers:
            if key == name:
                found = value
        return found

    def __repr__(self) -> str:
        return f"<Response {self.status_line!r} body={len(self.body)}B cut={self.cut}>"


def request(host: str, target: str) -> bytes:
    """The GET request for `target` (starts with `/`) on `host`; both already checked."""
    return (
        f"GET {target} HTTP/1.1\r\n"
        f"Host: {host}\r\n"
        f"User-Agent: {USER_AGENT}\r\n"
        "Accept: */*\r\n"
        "Accept-Encoding: identity\r\n"
        "Connection: close\r\n"
        "\r\n"
    ).encode("ascii")


def read_response(recv: Recv, limit: int) -> Response:
    """Read one response to a GET, skipping interim (1xx) responses."""
    stream = _Stream(recv)
    while True:
        status_line, code = _status(stream)
        headers = _headers(stream)
        if code < 100 or code == 101 or code >= 200:
            break
    if code < 200 or code in (204, 304):
        return Response(status_line, code, headers, b"", False, 0)
    return _with_body(stream, status_line, code, headers, limit)


def _with_body(
    stream: _Stream, status_line: str, code: int, headers: list[tuple[str, str]], limit: int
) -> Response:
    def response(body: bytes, cut: bool, length: int | None) -> Response:
        return Response(status_line, code, headers, body, cut, length)

    codings = [
        c.strip().lower() for n, v in headers if n == "transfer-encoding" for c in v.split(",")
    ]
    if codings and codings[-1] == "chunked":
        body, cut = _chunked(stream, limit)
        return response(body, cut, None if cut else len(body))
    if codings:  # another coding last: the body runs to the end of the connection
        body, cut = stream.until_end(limit)
        return response(body, cut, None if cut else len(body))
    lengths = {v.strip() for n, v in headers if n == "content-length"}
    if lengths:
        if len(lengths) != 1:
            raise ResponseError("conflicting Content-Length headers")
        text = lengths.pop()
        if not text.isdigit() or not text.isascii() or len(text) > 18:
            raise ResponseError(f"bad Content-Length {text[:40]!r}")
        length = int(text)
        return response(stream.exact(min(length, limit)), length > limit, length)
    body, cut = stream.until_end(limit)
    return response(body, cut, None if cut else len(body))


def _status(stream: _Stream) -> tuple[str, int]:
    line = stream.line(MAX_HEAD, "the status line")
    text = line.decode("latin-1")
    version, _, rest = text.partition(" ")
    code_text = rest[:3]
    if (
        not version.startswith("HTTP/1.")
        or not code_text.isdigit()
        or not code_text.isascii()
        or rest[3:4] not in ("", " ")
    ):
        raise ResponseError(f"not an HTTP/1 status line: {text[:80]!r}")
    return text, int(code_text)


def _headers(stream: _Stream) -> list[tuple[str, str]]:
    headers: list[tuple[str, str]] = []
    budget = MAX_HEAD
    while True:
        line = stream.line(budget, "the header section")
        budget -= len(line) + 2
        if not line:
            return headers
        if line[:1] in (b" ", b"\t"):
            raise ResponseError("a folded header line")
        name, colon, value = line.decode("latin-1").partition(":")
        if not colon or not name or name != name.strip():
            raise ResponseError(f"a bad header line: {line[:80]!r}")
        headers.append((name.lower(), value.strip(" \t")))


def _chunked(stream: _Stream, limit: int) -> tuple[bytes, bool]:
    body = bytearray()
    while True:
        size_text = stream.line(MAX_LINE, "a chunk-size line").split(b";", 1)[0].strip(b" \t")
        if not size_text or len(size_text) > 15 or size_text.strip(_HEX_DIGITS):
            raise ResponseError(f"a bad chunk size: {size_text[:40]!r}")
        size = int(size_text, 16)
        if size == 0:
            break
        room = limit - len(body)
        if size > room:
            body += stream.exact(room)
            return bytes(body), True
        body += stream.exact(size)
        if stream.line(MAX_LINE, "the end of a chunk") != b"":
            raise ResponseError("a chunk longer than its size")
    while stream.line(MAX_LINE, "the trailer section"):  # trailers: read and dropped
        pass
    return bytes(body), False


class _Stream:
    """Buffered reading from `recv`."""

    def __init__(self, recv: Recv) -> None:
        self._recv = recv
        self._buffer = bytearray()
        self._ended = False

    def _more(self, what: str) -> None:
        if self._ended:
            raise Truncated(f"the connection closed in {what}")
        chunk = self._recv(65536)
        if not chunk:
            self._ended = True
            raise Truncated(f"the connection closed in {what}")
        self._buffer += chunk

    def line(self, limit: int, what: str) -> bytes:
        """One line without its CRLF (a bare LF is accepted too)."""
        start = 0
        while True:
            end = self._buffer.find(b"\n", start)
            if end >= 0:
                break
            if len(self._buffer) > limit:
                raise ResponseError(f"{what} is too long")
            start = len(self._buffer)
            self._more(what)
        if end > limit:
            raise ResponseError(f"{what} is too long")
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        return line[:-1] if line.endswith(b"\r") else line

    def exact(self, n: int) -> bytes:
        while len(self._buffer) < n:
            self._more("the body")
        data = bytes(self._buffer[:n])
        del self._buffer[:n]
        return data

    def until_end(self, limit: int) -> tuple[bytes, bool]:
        """Up to `limit` bytes until the connection ends, and whether there were more."""
        while len(self._buffer) <= limit and not self._ended:
            chunk = self._recv(65536)
            if not chunk:
                self._ended = True
            self._buffer += chunk
        cut = len(self._buffer) > limit
        return bytes(self._buffer[:limit]), cut
