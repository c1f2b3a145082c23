"""The SSE decoder (issue 14): lines end at CR, LF or CRLF only, any chunking of a stream gives
the same events, and the cap holds while bytes come, not after a line."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.loopd.sse import SseDecoder, SseError, SseEvent
from tests.support.streams import decode_events

LIMIT = 1 << 20


def events_of(data: bytes, limit: int = LIMIT) -> list[SseEvent]:
    return decode_events([data], limit)


def test_events_are_split_at_blank_lines_and_their_data_lines_joined() -> None:
    data = b"event: a\ndata: 1\ndata: 2\n\ndata:3\n\n"
    assert events_of(data) == [SseEvent("a", "1\n2"), SseEvent("message", "3")]


@pytest.mark.parametrize("end", [b"\n", b"\r", b"\r\n"], ids=["LF", "CR", "CRLF"])
def test_each_of_cr_lf_and_crlf_ends_a_line(end: bytes) -> None:
    data = b"data: x" + end + b"data: y" + end + end
    assert events_of(data) == [SseEvent("message", "x\ny")]


@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\u0085", "\x0b", "\x0c", "\x1c", "\x1e"])
def test_the_other_line_breaks_of_python_are_text_inside_an_event(char: str) -> None:
    value = json.dumps({"content": f"a{char}b"}, ensure_ascii=False)
    (event,) = events_of(f"data: {value}\n\n".encode())
    assert json.loads(event.data) == {"content": f"a{char}b"}


def test_comments_ids_retries_and_events_without_data_are_not_given() -> None:
    data = b": keep-alive\n\nid: 7\nretry: 10\n\nevent: ping\n\n:x\ndata: real\n\n"
    assert events_of(data) == [SseEvent("message", "real")]


def test_a_byte_order_mark_opens_the_stream_without_changing_the_first_line() -> None:
    assert events_of(b"\xef\xbb\xbfdata: x\n\n") == [SseEvent("message", "x")]


def test_an_event_whose_lines_ended_is_given_at_the_end_a_cut_off_line_is_not() -> None:
    assert events_of(b"data: [DONE]\n") == [SseEvent("message", "[DONE]")]
    assert events_of(b'data: {"a": 1}\n\ndata: {"b"') == [SseEvent("message", '{"a": 1}')]


def test_a_line_without_a_newline_is_refused_once_the_stream_passes_the_cap() -> None:
    decoder = SseDecoder(1000)
    decoder.feed(b"data: " + b"x" * 900)
    with pytest.raises(SseError, match="the stream is larger than 1000 bytes"):
        decoder.feed(b"x" * 200)


def test_endless_comments_are_refused_once_the_stream_passes_the_cap() -> None:
    decoder = SseDecoder(10_000)
    with pytest.raises(SseError, match="the stream is larger than 10000 bytes"):
        for _ in range(10_000):
            assert decoder.feed(b": still here\n") == []


def test_a_crlf_split_between_two_chunks_ends_one_line() -> None:
    decoder = SseDecoder(LIMIT)
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\ndata: b\r") == []
    assert decoder.feed(b"\n\r") == [SseEvent("message", "a\nb")]


# -- any chunking gives the same events ---------------------------------------------------

_text = st.text(
    st.characters(exclude_categories=("Cs",)) | st.sampled_from("\u2028\u0085é€😀\r\n"),
    max_size=30,
)
_value = _text.map(lambda text: json.dumps({"t": text}, ensure_ascii=False))
_line = st.one_of(
    _value.map(lambda v: (f"data: {v}", v)),
    _text.filter(lambda t: "\r" not in t and "\n" not in t).map(lambda t: (f":{t}", None)),
    st.sampled_from([("event: x", None), ("id: 1", None), ("retry: 5", None)]),
    st.sampled_from([("data", ""), ("data:", ""), ("", None)]),
)
_end = st.sampled_from(["\n", "\r", "\r\n"])
_lines = st.lists(st.tuples(_line, _end), max_size=20)


def _bytes(lines: list[tuple[tuple[str, str | None], str]]) -> bytes:
    return "".join(line + end for (line, _), end in lines).encode()


@st.composite
def _chunked(draw: st.DrawFn) -> tuple[bytes, list[bytes]]:
    data = _bytes(draw(_lines))
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=12)))
    bounds = [0, *cuts, len(data)]
    return data, [data[a:b] for a, b in itertools.pairwise(bounds)]


@given(_chunked())
def test_any_chunking_of_a_stream_gives_the_same_events(case: tuple[bytes, list[bytes]]) -> None:
    """Chunks that split lines, CRLF pairs and UTF-8 characters (one byte at a time, too)."""
    data, chunks = case
    whole = decode_events([data], LIMIT)
    assert decode_events(chunks, LIMIT) == whole
    assert decode_events([bytes([b]) for b in data], LIMIT) == whole


@given(_lines)
def test_every_data_line_written_comes_back_in_order(
    lines: list[tuple[tuple[str, str | None], str]],
) -> None:
    written = [value for (_, value), _ in lines if value is not None]
    read = [
        part for event in decode_events([_bytes(lines)], LIMIT) for part in event.data.split("\n")
    ]
    assert read == written
