"""What a kept value takes in memory (`services.gatewayd.held`), checked against what
tracemalloc sees a decoded event keep: the bound gatewayd sets on what it holds is a bound on
its memory (issue 28), whatever characters the text has."""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from bxcore.wire import codec as wire
from bxcore.wire.messages import (
    AssistantText,
    EndReason,
    ToolCalled,
    ToolDone,
    TurnEnd,
    TurnEvent,
)
from services.gatewayd.held import held

EVENTS = [
    AssistantText("x" * 100_000),
    AssistantText("x" * 65_536 + "[… 34464 more characters cut]"),  # 2 bytes a character
    AssistantText("done 🎉 " * 5_000),  # 4 bytes a character
    ToolCalled("write_file", '{"path":"/w/a","content":"' + "é" * 20_000 + '"}'),
    ToolDone("read_file", True, 12, "twelve bytes"),
    TurnEnd(EndReason.DONE, 1234),
]


def kept_by_decoding(frame: bytes) -> tuple[object, int]:
    """The decoded value, and the bytes still allocated once the decoding is over."""
    gc.collect()
    tracemalloc.start()
    try:
        value = wire.decode(frame)
        gc.collect()
        kept, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return value, kept


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_an_event_is_counted_as_what_it_takes_in_memory(event: object) -> None:
    frame = wire.encode(TurnEvent("a-session", 3, 17, event))  # type: ignore[arg-type]
    value, kept = kept_by_decoding(frame)
    assert kept * 0.95 - 200 <= held(value) <= kept * 1.05 + 400, (held(value), kept)
