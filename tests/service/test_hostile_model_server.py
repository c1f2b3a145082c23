"""A hostile model server (issue 14), played over real HTTP on 127.0.0.1 to a real loopd, for
both providers, streamed: endless comments, a slow drip, a huge line, no newline, no end, a
4-16 MiB answer, a tool call cut off by the token limit, a whole body sent slowly. Each case
ends its turn with an `error` event that says why, within `[model] deadline_s`; another session
answers meanwhile; and loopd's memory stays within 50 MB of what it holds idle.

Timeouts are short here (`timeout_s` 0.5 s, `deadline_s` 2 s) so that the suite is quick.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterable, Iterator
from itertools import count
from typing import Any

import psutil  # type: ignore[import-untyped, unused-ignore]
import pytest

from bxcore.wire.messages import AssistantText, EndReason, OwnerSaid, TurnEnd, TurnError
from tests.fakes.model_server import Action, Answer, Call, Drip, FakeModel, Raw
from tests.support.brokerd import short_folder
from tests.support.daemons import init_home
from tests.support.loopd import Conversations, Loop, answer, stack

TIMEOUT_S = 0.5
DEADLINE_S = 2.0
SLACK_S = 2.0  # a busy 2-core machine: the event is written and read back after the deadline
MB = 1 << 20


@pytest.fixture(scope="module", params=["openai", "anthropic"])
def loop(request: pytest.FixtureRequest) -> Iterator[Loop]:
    provider = request.param
    with short_folder() as root, FakeModel() as model:
        config = (
            f'[model]\nprovider = "{provider}"\nbase_url = "{model.base_url}"\nstream = true\n'
            f"timeout_s = {TIMEOUT_S}\ndeadline_s = {DEADLINE_S}\n"
            "max_tokens = 1000\nretry_max_tokens = 2000\n"
        )
        with stack(init_home(root / "h", config), model, Conversations()) as running:
            ask_and_wait(running, "warm up", [answer("Warm.")])
            yield running


_sessions = count(1)


def provider_of(loop: Loop) -> str:
    return (
        "anthropic"
        if 'provider = "anthropic"' in (loop.home / "config.toml").read_text()
        else "openai"
    )


def ask_and_wait(loop: Loop, words: str, steps: list[Any]) -> list[Any]:
    session = f"s-{next(_sessions)}"
    loop.script(words, steps)
    return loop.wait_end(session, loop.say(session, words))


class PeakRss:
    """The largest resident size of a process while the context lasts, sampled every 10 ms."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.peak = self.process.memory_info().rss
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.wait(0.01):
            self.peak = max(self.peak, self.process.memory_info().rss)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()


# -- what the hostile server sends -----------------------------------------------------------


def openai_stream(text: str, *, finished: bool = True) -> bytes:
    chunks = [{"choices": [{"index": 0, "delta": {"content": piece}}]} for piece in text.split()]
    data = b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks)
    if finished:
        data += b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
        data += b"data: [DONE]\n\n"
    return data


def anthropic_stream(text: str, *, finished: bool = True) -> bytes:
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"content": []}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        *(
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}}
            for p in text.split()
        ),
    ]
    if finished:
        events.append({"type": "message_delta", "delta": {"stop_reason": "end_turn"}})
        events.append({"type": "message_stop"})
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def stream(provider: str, text: str, *, finished: bool = True) -> bytes:
    build = openai_stream if provider == "openai" else anthropic_stream
    return build(text, finished=finished)


def whole(provider: str, text: str) -> bytes:
    if provider == "openai":
        return json.dumps(
            {"choices": [{"message": {"content": text}, "finish_reason": "stop"}]}
        ).encode()
    body = {"content": [{"type": "text", "text": text}], "stop_reason": "end_turn"}
    return json.dumps(body).encode()


def one_at_a_time(data: bytes) -> Iterable[bytes]:
    return (data[n : n + 1] for n in range(len(data)))


def hostile(case: str, provider: str) -> list[Action]:
    """The server's answers to one conversation, a try each (all the same)."""
    cut = "length" if provider == "openai" else "max_tokens"
    half = Call("write_file", '{"path": "/tmp/x", "content": "the first ha')
    if case == "endless comments":
        return [Drip(lambda: itertools.repeat(b": keep-alive\n"), every_s=0.01)] * 3
    if case == "slow drip":
        data = stream(provider, "one byte every fifth of a second")
        return [Drip(lambda: one_at_a_time(data), every_s=0.2)] * 3
    if case == "huge line":
        megabyte = b"x" * MB
        return [Drip(lambda: itertools.chain([b"data: "], itertools.repeat(megabyte, 200)))] * 3
    if case == "no newline":
        flat = stream(provider, "not one line ends").replace(b"\n", b" ")
        return [Raw(flat, content_type="text/event-stream")]
    if case == "no end":
        return [
            Raw(
                stream(provider, "an answer without its end", finished=False),
                content_type="text/event-stream",
            )
        ]
    if case.endswith("MiB answer"):
        size = int(case.split()[0]) * MB
        return [Answer("x" * size)] * 3
    if case == "cut-off tool call":
        return [Answer("", (half,), finish=cut)] * 2
    if case == "whole body sent slowly":
        body = whole(provider, "a whole answer, slowly")
        return [Drip(lambda: one_at_a_time(body), every_s=0.2, content_type="application/json")] * 3
    raise AssertionError(case)


LATE = f"did not finish its answer within {DEADLINE_S:g} s ([model] deadline_s)"
ENDLESS = "the stream ended before the answer did"
TOO_LARGE = "the model's answer is too large to keep in the session's history"
#: What the error says, for each case (any of these).
SAYS: dict[str, tuple[str, ...]] = {
    "endless comments": (LATE,),
    "slow drip": (LATE,),
    # read at once, the cap refuses it; on a busy machine, reading 16 MiB may take longer
    # than timeout_s, and it is a stream gone quiet
    "huge line": (f"the stream is larger than {16 * MB} bytes", "sent no complete event", LATE),
    "no newline": (ENDLESS,),
    "no end": (ENDLESS,),
    # read in time, it is too large for the history; on a busy machine, streaming megabytes
    # may take longer than timeout_s (then it is tried again) or than the deadline
    "5 MiB answer": (TOO_LARGE, "sent no complete event", LATE),
    "15 MiB answer": (TOO_LARGE, "sent no complete event", LATE),
    "cut-off tool call": (
        "the model's answer was cut off by its token limit in the middle of a tool call, "
        "also on a second try with [model] retry_max_tokens = 2000",
    ),
    "whole body sent slowly": (LATE,),
}


@pytest.mark.parametrize("case", list(SAYS))
def test_a_hostile_answer_ends_the_turn_clearly_in_time_and_bounded_while_others_answer(
    loop: Loop, case: str
) -> None:
    provider = provider_of(loop)
    words = f"a question for a server playing {case}"
    loop.script(words, hostile(case, provider))
    session = f"hostile-{next(_sessions)}"
    idle = psutil.Process(loop.loopd.process.pid).memory_info().rss
    with PeakRss(loop.loopd.process.pid) as rss:
        started = time.monotonic()
        turn = loop.say(session, words)
        other = f"meanwhile, while {case}"
        events = ask_and_wait(loop, other, [answer("Still here.")])
        assert events[-2:] == [AssistantText("Still here."), TurnEnd(EndReason.DONE)]
        assert time.monotonic() - started < DEADLINE_S + SLACK_S
        events = loop.wait_end(session, turn, timeout=DEADLINE_S + 10)
        took = time.monotonic() - started

    assert events[0] == OwnerSaid(words)
    assert events[-1] == TurnEnd(EndReason.ERROR)
    (error,) = [e for e in events if isinstance(e, TurnError)]
    assert any(says in error.message for says in SAYS[case]), error
    assert took < DEADLINE_S + SLACK_S, took
    grew = (rss.peak - idle) / MB
    assert grew < 50, f"loopd grew by {grew:.0f} MB"
    assert loop.loopd.process.poll() is None
