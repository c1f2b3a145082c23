"""The socket-free HTTP/1.1 reader and the model's view of a response, fed recorded bytes."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from services.toolkit.http1 import Response, ResponseError, Truncated, read_response, request
from services.toolkit.http_view import is_text, render


def _replay(data: bytes, piece: int = 1 << 20) -> Callable[[int], bytes]:
    """A `recv` that hands out `data` in pieces of at most `piece` bytes, then b""."""
    rest = memoryview(data)

    def recv(n: int) -> bytes:
        nonlocal rest
        out, rest = rest[: min(n, piece)], rest[min(n, piece) :]
        return bytes(out)

    return recv


def _read(data: bytes, limit: int = 1000, piece: int = 1 << 20) -> Response:
    return read_response(_replay(data, piece), limit)


def test_the_request_is_a_plain_get_that_asks_for_no_compression() -> None:
    assert request("example.test", "/a?b=c") == (
        b"GET /a?b=c HTTP/1.1\r\nHost: example.test\r\nUser-Agent: boxmaker-toolkit\r\n"
        b"Accept: */*\r\nAccept-Encoding: identity\r\nConnection: close\r\n\r\n"
    )


@pytest.mark.parametrize("piece", [1, 3, 1 << 20])
def test_a_response_is_read_whatever_pieces_it_arrives_in(piece) -> None:
    data = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello"
    response = _read(data, piece=piece)
    assert (response.status_line, response.code, response.body) == (
        "HTTP/1.1 200 OK",
        200,
        b"hello",
    )
    assert (response.cut, response.length) == (False, 5)
    assert response.header("content-type") == "text/plain"


def test_interim_responses_are_skipped() -> None:
    data = (
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    )
    response = _read(data)
    assert (response.code, response.body, response.header("link")) == (200, b"ok", None)


def test_chunk_extensions_and_trailers_are_read_and_dropped() -> None:
    data = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3;name=value\r\nabc\r\nA\r\n0123456789\r\n0\r\nX-Trailer: 1\r\n\r\n"
    )
    response = _read(data)
    assert (response.body, response.cut, response.length) == (b"abc0123456789", False, 13)


def test_a_body_that_ends_with_the_connection_is_read_to_the_end() -> None:
    response = _read(b"HTTP/1.0 200 OK\r\n\r\nto the end", piece=4)
    assert (response.status_line, response.body, response.length) == (
        "HTTP/1.0 200 OK",
        b"to the end",
        10,
    )


@pytest.mark.parametrize("code", [204, 304])
def test_a_response_that_has_no_body_is_not_waited_for(code) -> None:
    response = _read(f"HTTP/1.1 {code} X\r\nContent-Length: 99\r\n\r\n".encode())
    assert (response.body, response.cut) == (b"", False)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"", "the connection closed in the status line"),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
            "the connection closed in the body",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
            "the connection closed in the body",
        ),
        (b"HTTP/1.1 200 OK\r\nContent-Type: x", "the connection closed in the header section"),
    ],
)
def test_a_response_cut_short_is_truncated(data, why) -> None:
    with pytest.raises(Truncated, match=f"^{why}$"):
        _read(data)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP/1 status line"),
        (b"HTTP/1.1 2000 OK\r\n\r\n", "not an HTTP/1 status line"),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
            "conflicting Content-Length headers",
        ),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "bad Content-Length '-1'"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nabcde\r\n0\r\n\r\n",
            "a bad chunk size",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n",
            "a chunk longer than its size",
        ),
        (b"HTTP/1.1 200 OK\r\n folded: no\r\n\r\n", "a folded header line"),
        (b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n", "a bad header line"),
        (b"HTTP/1.1 200 OK\r\nX: " + b"y" * 70_000 + b"\r\n\r\n", "the header section is too long"),
    ],
)
def test_a_response_that_is_not_http_is_refused(data, why) -> None:
    with pytest.raises(ResponseError, match=why):
        _read(data)


def test_only_limit_bytes_of_a_long_body_are_kept_and_it_says_it_was_cut() -> None:
    response = _read(b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n" + b"a" * 5000, limit=1000)
    assert (len(response.body), response.cut, response.length) == (1000, True, 5000)
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"400\r\n" + b"b" * 1024
    response = _read(chunked + b"\r\n" * 3, limit=1000)  # never reads past what it keeps
    assert (len(response.body), response.cut, response.length) == (1000, True, None)


@pytest.mark.parametrize(
    ("media", "text"),
    [
        ("text/html", True),
        ("text/csv", True),
        ("application/json", True),
        ("application/ld+json", True),
        ("application/rss+xml", True),
        ("image/svg+xml", True),
        ("application/javascript", True),
        ("image/png", False),
        ("application/pdf", False),
        ("application/octet-stream", False),
        ("video/mp4", False),
    ],
)
def test_which_types_are_text(media, text) -> None:
    assert is_text(media) is text


def test_a_cut_body_drops_a_character_split_by_the_cut() -> None:
    response = Response(
        "HTTP/1.1 200 OK", 200, [("content-type", "text/plain")], b"ab\xe2\x98", True, 9
    )
    assert render("https://x.test/", response, 4) == (
        "HTTP/1.1 200 OK\nContent-Type: text/plain\n\n"
        "ab\n[body cut at 4 bytes; the body has 9 bytes]"
    )


def test_control_characters_in_headers_do_not_reach_the_model_as_line_breaks() -> None:
    response = Response("HTTP/1.1 302 Found\x1b", 302, [("location", "/x\x00\ty")], b"", False, 0)
    view = render("https://x.test/a", response, 10)
    assert view == (
        "HTTP/1.1 302 Found \nContent-Type: (none)\n\n"
        "redirect (302) to https://x.test/x  y: fetch that URL to follow it"
    )
