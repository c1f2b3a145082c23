"""Test doubles of peer daemons, for service tests that spawn one real daemon alone.

`FakeBrokerState` stands in for brokerd's broker socket where only its `state_query` answer
matters (memoryd asks it for a session's label before it stores a note). It runs in a thread
of the test process with plain, blocking ZeroMQ, and stops when closed. It decides nothing
and records nothing; never used by production code.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Self

import zmq

from bxcore.labels import SESSION_DEFAULT, Label
from bxcore.router import tune
from bxcore.wire import codec as wire
from bxcore.wire.messages import Error, ErrorCode, State, StateQuery


class FakeBrokerState:
    """A ROUTER bound at `endpoint` that answers `state_query` with `State(label)`.

    `label` is the label of every session unless `labels` names the session; set either at
    any time. `answering = False` makes it read and drop every request (a brokerd that hangs);
    `delay_s` waits before each answer. `queries` lists each `StateQuery` it received. Any
    other message gets `error bad_message`; a frame that does not decode is dropped."""

    def __init__(self, endpoint: str, label: Label = SESSION_DEFAULT, *, delay_s: float = 0.0):
        self.endpoint = endpoint
        self.label = label
        self.labels: dict[str, Label] = {}
        self.answering = True
        self.delay_s = delay_s
        self.queries: list[StateQuery] = []
        self._stopping = threading.Event()
        self._ctx = zmq.Context()
        self._socket = self._ctx.socket(zmq.ROUTER)
        tune(self._socket)
        self._socket.bind(endpoint)
        self._thread = threading.Thread(target=self._serve, name="fake-brokerd", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        state = "stopped" if self._stopping.is_set() else "answering" if self.answering else "mute"
        return f"<FakeBrokerState {self.endpoint} {state}, {len(self.queries)} queries>"

    def _serve(self) -> None:
        poller = zmq.Poller()
        poller.register(self._socket, zmq.POLLIN)
        try:
            while not self._stopping.is_set():
                if not poller.poll(50):
                    continue
                frames = self._socket.recv_multipart()
                if len(frames) != 2:
                    continue
                try:
                    message = wire.decode(frames[1])
                except wire.DecodeError:
                    continue
                answer = self._answer(message)
                if answer is None or not self.answering:
                    continue
                if self.delay_s and self._stopping.wait(self.delay_s):
                    return
                self._socket.send_multipart([frames[0], wire.encode(answer)])
        finally:
            self._socket.close(linger=0)

    def _answer(self, message: object) -> object:
        if isinstance(message, StateQuery):
            self.queries.append(message)
            label = self.labels.get(message.session, self.label)
            return State(message.id, message.session, label)
        request_id = getattr(message, "id", None)
        if request_id is None:
            return None
        return Error(request_id, ErrorCode.BAD_MESSAGE, "the fake brokerd takes only state_query")

    def wait_for_queries(self, count: int, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.queries) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self!r}: expected {count} queries")
            time.sleep(0.01)

    def close(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=5)
        self._ctx.term()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
