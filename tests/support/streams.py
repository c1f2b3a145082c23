"""Whole streams at once, for tests: every event of an SSE stream given in pieces, and the
reply a model's whole stream of events makes (loopd reads both as they come)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from services.loopd.model import Message, Reply
from services.loopd.replies import Streamed
from services.loopd.sse import SseDecoder, SseEvent


def decode_events(chunks: Iterable[bytes], limit: int) -> list[SseEvent]:
    """Every complete event of a whole stream given in pieces."""
    decoder = SseDecoder(limit)
    events = [event for chunk in chunks for event in decoder.feed(chunk)]
    return events + decoder.end()


def reply_of_events(
    streamed: Streamed, events: Iterable[SseEvent], messages: Sequence[Message]
) -> Reply:
    """The Reply of a whole stream's events."""
    for event in events:
        if streamed.take(event.data):
            break
    return streamed.reply(messages)
