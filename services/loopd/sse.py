"""Server-sent events (the WHATWG `text/event-stream` format), decoded from bytes as they come.

Pure: no I/O, no clock. Lines end at CR, LF or CRLF and nowhere else (U+2028, U+0085 and the
other breaks of `str.splitlines` are text inside a JSON value); the stream is capped as each
piece is fed, so bytes without a newline never grow past the cap. Only complete events are
given out: a reader counts them, not bytes, to tell a live stream.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_CR, _LF = 0x0D, 0x0A
_BREAK = re.compile(rb"[\r\n]")


class SseError(ValueError):
    """The stream cannot be read as events; `str()` is one line."""


@dataclass(frozen=True, slots=True)
class SseEvent:
    event: str  # "message" when the stream names none
    data: str  # the `data:` lines joined with "\n"


class SseDecoder:
    """Feed it bytes in any pieces; it gives each complete event once.

    `limit` bounds every byte fed in all, and so any line or event. Comments (`:` lines),
    `id:` and `retry:` are read past; an event without `data:` is not given.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.fed = 0  # bytes fed in all
        self._line = bytearray()  # the line read so far, without its end
        self._after_cr = False  # the last byte was a CR: an LF right after it ends nothing
        self._started = False  # a first line was read (a BOM may only open the stream)
        self._event = ""
        self._data: list[str] = []

    def __repr__(self) -> str:
        return f"<SseDecoder {self.fed} bytes, {len(self._line)} in the open line>"

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """The events that `chunk` completes, in order. Raises `SseError` past the limit."""
        self.fed += len(chunk)
        if self.fed > self.limit:
            raise SseError(f"the stream is larger than {self.limit} bytes")
        if not chunk:  # nothing: a CR just before still waits for the LF that may follow
            return []
        events: list[SseEvent] = []
        start = 0
        if self._after_cr and chunk[:1] == b"\n":
            start = 1
        self._after_cr = False
        while start < len(chunk):
            end = _line_end(chunk, start)
            if end < 0:
                self._line += chunk[start:]
                break
            self._line += chunk[start:end]
            event = self._take_line(bytes(self._line))
            self._line.clear()
            if event is not None:
                events.append(event)
            if chunk[end] == _CR:
                if end + 1 == len(chunk):
                    self._after_cr = True
                elif chunk[end + 1] == _LF:
                    end += 1
            start = end + 1
        return events

    def end(self) -> list[SseEvent]:
        """The stream closed: the event whose lines all ended but no blank line followed (a
        server that closes right after `data: [DONE]\n`); a line cut off is dropped. Whether
        the answer is complete is the provider's to judge (`[DONE]`, a finish reason)."""
        self._line.clear()
        event = self._dispatch()
        return [event] if event is not None else []

    def _take_line(self, raw: bytes) -> SseEvent | None:
        if not self._started:
            self._started = True
            raw = raw.removeprefix(b"\xef\xbb\xbf")
        if not raw:
            return self._dispatch()
        if raw[:1] == b":":
            return None
        line = raw.decode("utf-8", "replace")
        name, colon, value = line.partition(":")
        if colon:
            value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        return None

    def _dispatch(self) -> SseEvent | None:
        event = SseEvent(self._event or "message", "\n".join(self._data)) if self._data else None
        self._event, self._data = "", []
        return event


def _line_end(chunk: bytes, start: int) -> int:
    """The index of the first CR or LF at or after `start`, or -1."""
    found = _BREAK.search(chunk, start)
    return found.start() if found is not None else -1
