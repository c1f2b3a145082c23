"""Many sessions through a real loopd, for its memory test and `bench/loop_memory.py`: a fake
model that answers each turn at once, a stub broker in this process, and a driver that keeps a
window of turns in flight, each followed to its `turn_end`.

The stub broker denies every tool call `no_grant` and takes every `absorb`: loopd's memory is
measured alone, without brokerd (whose own is measured on its own).

    with FakeModel(record=False) as model, StubBroker(home), running("loopd", home) as loopd:
        model.respond_with(crowd_model(calls=1, text_bytes=2000))
        with Crowd(home) as crowd:
            crowd.run([(f"s-{n}", "go") for n in range(2000)])
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import psutil  # type: ignore[import-untyped, unused-ignore]
import zmq

from bxcore.deny import DenyReason
from bxcore.home.layout import Home
from bxcore.labels import DataClass, Label
from bxcore.wire import codec as wire
from bxcore.wire.messages import (
    Absorb,
    Accepted,
    Denied,
    Error,
    ErrorCode,
    History,
    HistoryQuery,
    OwnerMessage,
    Ping,
    Pong,
    State,
    ToolRequest,
    ToolResponse,
    TurnEnd,
    TurnEvent,
)
from tests.fakes.model_server import Answer, Call, Request


def rss_mb(pid: int) -> float:
    """A process's resident set size, in MB (10^6 bytes)."""
    rss: int = psutil.Process(pid).memory_info().rss
    return rss / 1e6


def crowd_model(
    *, calls: int = 1, steps: int = 1, text_bytes: int = 200
) -> Callable[[Request], Answer]:
    """Each turn: `steps` answers of `calls` tool calls each (`read_file`, which the stub
    broker denies), then `text_bytes` of words. The step is read from the request: the model's
    answers since the owner's last message."""
    words = ("All done. " * (text_bytes // 10 + 1))[:text_bytes]

    def respond(request: Request) -> Answer:
        messages = request.body.get("messages", []) if isinstance(request.body, dict) else []
        since = itertools.takewhile(lambda m: m.get("role") != "user", reversed(messages))
        step = sum(1 for m in since if m.get("role") == "assistant")
        if step >= steps:
            return Answer(words)
        path = json.dumps({"path": f"/etc/hostname-{step}"})
        return Answer("", tuple(Call("read_file", path) for _ in range(calls)))

    return respond


class StubBroker:
    """A ROUTER on the home's broker endpoint, in a thread: `tool_request` is denied
    `no_grant`, `absorb` answered with a public label, `ping` with a pong."""

    def __init__(self, home: Path) -> None:
        self.calls = 0
        self._socket: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.bind(Home(home).endpoint("broker"))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        return f"StubBroker({self.calls} calls)"

    def __enter__(self) -> StubBroker:
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._socket.close(linger=0)

    def _serve(self) -> None:
        while not self._stop.is_set():
            if not self._socket.poll(50):
                continue
            identity, frame = self._socket.recv_multipart()
            message = wire.decode(frame)
            answer: object
            if isinstance(message, ToolRequest):
                self.calls += 1
                answer = ToolResponse(message.id, Denied(DenyReason.NO_GRANT))
            elif isinstance(message, Absorb):
                answer = State(message.id, message.session, Label(DataClass.PUBLIC, False))
            elif isinstance(message, Ping):
                answer = Pong(message.id, "brokerd", 0, "stub", "")
            else:
                request_id = getattr(message, "id", "?")
                answer = Error(request_id, ErrorCode.BAD_MESSAGE, "the stub broker")
            self._socket.send_multipart([identity, wire.encode(answer)])


class Crowd:
    """Owner messages to loopd, `window` turns in flight, each awaited to its `turn_end` (on
    loop-events, or in the history when the stream dropped it)."""

    def __init__(self, home: Path, *, window: int = 16, timeout_s: float = 60.0) -> None:
        self.home = Home(home)
        self.window = window
        self.timeout_s = timeout_s
        self.turns = 0
        context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        self._events: zmq.Socket[bytes] = context.socket(zmq.SUB)
        self._events.setsockopt(zmq.LINGER, 0)
        self._events.setsockopt(zmq.RCVHWM, 0)
        self._events.setsockopt(zmq.SUBSCRIBE, b"")
        self._events.connect(self.home.endpoint("loop-events"))
        self._loop: zmq.Socket[bytes] = context.socket(zmq.DEALER)
        self._loop.setsockopt(zmq.LINGER, 0)
        self._loop.connect(self.home.endpoint("loop"))
        self._ids = itertools.count(1)

    def __repr__(self) -> str:
        return f"Crowd({self.home.root}, {self.turns} turns)"

    def __enter__(self) -> Crowd:
        return self

    def __exit__(self, *_: object) -> None:
        self._events.close(linger=0)
        self._loop.close(linger=0)

    def ask(self, message: object, timeout_s: float = 30.0) -> object:
        self._loop.send(wire.encode(message))
        deadline = time.monotonic() + timeout_s
        wanted = getattr(message, "id", None)
        while (left := deadline - time.monotonic()) > 0:
            if self._loop.poll(int(left * 1000) + 1):
                answer = wire.decode(self._loop.recv())
                if getattr(answer, "id", None) == wanted:
                    return answer
        raise TimeoutError(f"loopd did not answer {message!r}")

    def run(self, said: Iterable[tuple[str, str]]) -> None:
        """Each (session, text) as an owner message, awaited to its turn's end."""
        waiting: dict[tuple[str, int], float] = {}  # (session, turn) -> sent at
        pending = iter(said)
        more = True
        while more or waiting:
            while more and len(waiting) < self.window:
                try:
                    session, text = next(pending)
                except StopIteration:
                    more = False
                    break
                accepted = self.ask(OwnerMessage(f"c-{next(self._ids)}", session, text))
                assert isinstance(accepted, Accepted), accepted
                waiting[(session, accepted.turn)] = time.monotonic()
            if waiting:
                self._take_ends(waiting)

    def _take_ends(self, waiting: dict[tuple[str, int], float]) -> None:
        if self._events.poll(200):
            while self._events.poll(0):
                event = wire.decode(self._events.recv())
                ended = isinstance(event, TurnEvent) and isinstance(event.event, TurnEnd)
                if ended and waiting.pop((event.session, event.turn), None) is not None:
                    self.turns += 1
            return
        now = time.monotonic()
        for (session, turn), sent in list(waiting.items()):  # the stream may have dropped it
            if self._ended(session, turn):
                del waiting[(session, turn)]
                self.turns += 1
            elif now - sent > self.timeout_s:
                raise TimeoutError(f"{session} turn {turn} did not end in {self.timeout_s} s")

    def _ended(self, session: str, turn: int) -> bool:
        after = 0
        while True:
            page = self.ask(HistoryQuery(f"h-{next(self._ids)}", session, after or None))
            assert isinstance(page, History), page
            if any(e.turn == turn and isinstance(e.event, TurnEnd) for e in page.events):
                return True
            if not page.more or not page.events:
                return False
            after = page.events[-1].seq
