"""Helpers for loopd's service tests: real brokerd, memoryd and loopd on one home, the fake
model answering each conversation from its own script, and the turn followed on its sockets.

The fake model serves every session of a module at once, so it answers by conversation: a
request's first user message (the owner's first words, or a sub-agent's task) names the script
it plays, one action a request, in order.

    with stack(home, model, Conversations()) as loop:
        loop.script("read a.md please", [call("read_file", path=...), answer("done")])
        turn = loop.say("chat-1", "read a.md please")
        events = loop.wait_end("chat-1", turn)
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import zmq

from bxcore.home.layout import Home
from bxcore.wire import codec as wire
from bxcore.wire.messages import (
    Accepted,
    Event,
    History,
    HistoryQuery,
    OwnerMessage,
    TurnEnd,
    TurnEvent,
)
from tests.fakes.model_server import Action, Answer, Call, Failure, FakeModel, Request
from tests.support.daemons import Daemon, running, start

Step = Action | Callable[[Request], Action]


def answer(text: str = "", *, delay_s: float = 0.0) -> Answer:
    """The model answers with words only: the turn ends."""
    return Answer(text, (), delay_s)


def call(tool: str, arguments: object = None, /, **fields: Any) -> Answer:
    """The model calls one tool: `arguments` as given (a string is sent as written, anything
    else as a JSON value), else `fields` as a JSON string."""
    written = arguments if arguments is not None else json.dumps(fields)
    return Answer("", (Call(tool, written),))


def first_user_text(request: Request) -> str | None:
    """The first user message's text, as chat completions (a string) or the Messages API (its
    first text block) sends it."""
    messages = request.body.get("messages") if isinstance(request.body, dict) else None
    for message in messages or ():
        if isinstance(message, dict) and message.get("role") == "user":
            text = message.get("content")
            if isinstance(text, list) and text and isinstance(text[0], dict):
                text = text[0].get("text")
            return text if isinstance(text, str) else None
    return None


def messages(request: Any) -> list[dict[str, Any]]:
    """The chat messages of one recorded request body."""
    found = request.get("messages") if isinstance(request, dict) else None
    return list(found) if isinstance(found, list) else []


def tool_results(request: Any) -> list[str]:
    """What the model read back from its tool calls, in the request's order."""
    return [m["content"] for m in messages(request) if m.get("role") == "tool"]


class Conversations:
    """The fake model's part: a script for each conversation, keyed by its first user words.
    An unknown conversation, or one past the end of its script, gets a 400 (which the turn
    reports as an error at once)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scripts: dict[str, list[Step]] = {}
        self._endless: dict[str, Callable[[Request], Action]] = {}
        self._seen: dict[str, list[Any]] = {}

    def __repr__(self) -> str:
        with self._lock:
            return f"Conversations({ {k: len(v) for k, v in self._seen.items()} })"

    def add(self, first_words: str, steps: Sequence[Step]) -> None:
        with self._lock:
            assert first_words not in self._scripts, f"{first_words!r} is scripted twice"
            self._scripts[first_words] = list(steps)
            self._seen[first_words] = []

    def forever(self, first_words: str, step: Callable[[Request], Action]) -> None:
        """Answer every request of the conversation with `step(request)`."""
        self.add(first_words, [])
        with self._lock:
            self._endless[first_words] = step

    def requests(self, first_words: str) -> list[Any]:
        """The bodies of the requests this conversation made, in order."""
        with self._lock:
            return list(self._seen.get(first_words, ()))

    def wait_requests(self, first_words: str, count: int, timeout: float = 15.0) -> list[Any]:
        deadline = time.monotonic() + timeout
        while len(found := self.requests(first_words)) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{first_words!r} made {len(found)} of {count} requests")
            time.sleep(0.01)
        return found

    def respond(self, request: Request) -> Action | None:
        key = first_user_text(request)
        with self._lock:
            if key is None or key not in self._scripts:
                return None
            self._seen[key].append(request.body)
            endless = self._endless.get(key)
            script = self._scripts[key]
            step = script.pop(0) if script else None
        if step is None and endless is not None:
            step = endless
        if step is None:
            return Failure(400, f"the script of {key!r} has no more answers")
        return step(request) if callable(step) else step


@dataclass
class Loop:
    """One home with brokerd, memoryd and loopd running, and the model's scripts."""

    home: Path
    model: FakeModel
    conversations: Conversations
    daemons: dict[str, Daemon] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"Loop({self.home}, {sorted(self.daemons)})"

    @property
    def loopd(self) -> Daemon:
        return self.daemons["loopd"]

    def script(self, first_words: str, steps: Sequence[Step]) -> None:
        self.conversations.add(first_words, steps)

    def say(self, session: str, text: str) -> int:
        """The owner's message; the turn number loopd gave it."""
        accepted = self.loopd.ask(OwnerMessage(f"o-{session}", session, text))
        assert isinstance(accepted, Accepted) and accepted.session == session, accepted
        return accepted.turn

    def history(self, session: str) -> list[TurnEvent]:
        """Every event of `session` as loopd keeps it, page by page."""
        events: list[TurnEvent] = []
        while True:
            after = events[-1].seq if events else 0
            page = self.loopd.ask(HistoryQuery("h", session, after or None))
            assert isinstance(page, History), page
            assert page.events or not page.more, f"{session}: history stuck after seq {after}"
            events += page.events
            if not page.more:
                return events

    def wait_for(
        self, session: str, wanted: Callable[[TurnEvent], bool], timeout: float = 20.0
    ) -> TurnEvent:
        """The first event of `session` that `wanted` accepts, polling the history."""
        deadline = time.monotonic() + timeout
        while True:
            events = self.history(session)
            found = next((e for e in events if wanted(e)), None)
            if found is not None:
                return found
            if time.monotonic() > deadline:
                raise TimeoutError(f"{session}: no such event in {timeout} s; saw {events!r}")
            time.sleep(0.02)

    def wait_end(self, session: str, turn: int = 1, timeout: float = 20.0) -> list[Event]:
        """The events of `turn` once it has ended (with `turn_end` last)."""
        self.wait_for(session, lambda e: e.turn == turn and isinstance(e.event, TurnEnd), timeout)
        return [e.event for e in self.history(session) if e.turn == turn]

    def restart_loopd(self) -> Daemon:
        """SIGKILL loopd (a crash), start it again, and wait for its pong."""
        self.loopd.kill()
        new = start("loopd", self.home)
        self.daemons["loopd"] = new
        new.wait_ready()
        return new


@contextlib.contextmanager
def stack(home: Path, model: FakeModel, conversations: Conversations) -> Iterator[Loop]:
    """brokerd, memoryd and loopd on `home` (made with `init_home`), all stopped after."""
    model.respond_with(conversations.respond)
    loop = Loop(home, model, conversations)
    with running("brokerd", home) as brokerd, running("memoryd", home) as memoryd:
        loop.daemons.update(brokerd=brokerd, memoryd=memoryd)
        loop.daemons["loopd"] = start("loopd", home)
        try:
            loop.loopd.wait_ready()
            yield loop
        finally:
            loop.loopd.stop()


# --- loop-events ------------------------------------------------------------------------------


class LoopEvents:
    """A SUB socket on loop-events, joined (proven live) before the turns a test watches."""

    def __init__(self, home: Path) -> None:
        self.socket: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.SUB)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.MAXMSGSIZE, wire.MAX_MESSAGE)
        self.socket.setsockopt(zmq.SUBSCRIBE, b"")
        self.socket.connect(Home(home).endpoint("loop-events"))
        self.frames: list[bytes] = []
        self._syncs = 0

    def __enter__(self) -> LoopEvents:
        return self

    def __exit__(self, *_: object) -> None:
        self.socket.close(linger=0)

    def join(self, loop: Loop, timeout: float = 10.0) -> None:
        """Send sync turns (each a session of its own) until one of their events arrives."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._syncs += 1
            words = f"sync {self._syncs} of {id(self)}"
            loop.script(words, [answer("synced")])
            session = f"sync-{self._syncs}"
            loop.say(session, words)
            if self._until(partial(_of_session, session), 0.3) is not None:
                return
        raise TimeoutError("loop-events never delivered an event")

    def _until(self, wanted: Callable[[TurnEvent], bool], timeout: float) -> TurnEvent | None:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            if not self.socket.poll(int(left * 1000) + 1):
                return None
            frame = self.socket.recv()
            self.frames.append(frame)
            event = wire.decode(frame)
            if isinstance(event, TurnEvent) and wanted(event):
                return event
        return None

    def wait_end(self, session: str, turn: int = 1, timeout: float = 20.0) -> None:
        ended = self._until(
            lambda e: e.session == session and e.turn == turn and isinstance(e.event, TurnEnd),
            timeout,
        )
        if ended is None:
            raise TimeoutError(f"no turn_end of {session} turn {turn} on loop-events")

    def of(self, session: str) -> list[tuple[bytes, TurnEvent]]:
        """The frames received for `session`, with their decoded events."""
        found = []
        for frame in self.frames:
            event = wire.decode(frame)
            if isinstance(event, TurnEvent) and event.session == session:
                found.append((frame, event))
        return found


def _of_session(session: str, event: TurnEvent) -> bool:
    return event.session == session


# --- a model server that is down, then up -----------------------------------------------------


class LatePort:
    """A TCP port on 127.0.0.1 that refuses every connection (bound, not listening) until
    `forward_to` makes it listen and pass each connection on to another local port."""

    def __init__(self) -> None:
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()

    def __repr__(self) -> str:
        state = "closed" if self._closed.is_set() else f"{len(self._threads)} threads"
        return f"LatePort(127.0.0.1:{self.port}, {state})"

    def __enter__(self) -> LatePort:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def forward_to(self, port: int) -> None:
        self._listener.listen()
        self._spawn(self._accept, port)

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _accept(self, port: int) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", port))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, upstream]
            self._spawn(_pump, client, upstream)
            self._spawn(_pump, upstream, client)

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            sockets, threads = list(self._sockets), list(self._threads)
        for each in sockets:
            with contextlib.suppress(OSError):
                each.shutdown(socket.SHUT_RDWR)
        for thread in threads:
            thread.join(timeout=5)
        for each in sockets:
            each.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)
