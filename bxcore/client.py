"""The DEALER clients every boxmaker process uses to ask another one something (SPEC §3.1):
`Client` for the daemons (asyncio), `SyncClient` for bxctl and the tests (blocking).

Both work the one way, written once here: one request at a time a client; `ask` sends one frame
and takes the answer that carries the request's id, skipping late answers to earlier tries.
No answer in time: close the socket, open a new one and send the same request again (the
zguide's "Lazy Pirate"), as many tries as `bxcore.wire.asking` gives the request on the client's
socket, then `Unreachable`. A frame that does not decode is `ProtocolError`; an answer of a
type that does not answer the request (`bxcore.wire.asking.answer_of`) is `WrongAnswer`; all three
are `AskFailed`, whose `kind` says which. An `error` answer is returned: it is the server's
word. A socket that saw any trouble is closed, never reused. `async with` / `with` close it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any, ClassVar, Generic, Protocol, Self, TypeVar, cast

import anyio
import zmq
import zmq.asyncio

from bxcore.router import tune
from bxcore.wire import codec as wire
from bxcore.wire.asking import SERVICE, Patience, answer_of, patience
from bxcore.wire.messages import Asks, Error

S = TypeVar("S", bound="zmq.Socket[Any]")
A = TypeVar("A")
Secure = Callable[["zmq.Socket[Any]"], None]


class Request(Protocol):
    """A message that asks: it has an id, which its answer echoes."""

    TYPE: ClassVar[str]

    @property
    def id(self) -> str: ...


class AskFailed(Exception):
    """A request got no usable answer; `kind` says how, the text says what to do."""

    kind: ClassVar[str]


class Unreachable(AskFailed):
    """The server did not answer; the text names it, the endpoint and what was tried."""

    kind = "unreachable"


class ProtocolError(AskFailed):
    """The server answered with something that is not a message; `reason` says why."""

    kind = "protocol"

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"{name} answered with a bad message: {reason}")
        self.reason = reason


class WrongAnswer(AskFailed):
    """The server answered with a message that does not answer the request."""

    kind = "wrong answer"

    def __init__(self, name: str, request: Request, answer: object) -> None:
        said = getattr(answer, "TYPE", type(answer).__name__)
        super().__init__(f"{name} answered {said} to {request.TYPE}")


def dealer(ctx: zmq.Context[S], endpoint: str, secure: Secure | None = None) -> S:
    """A DEALER connected to `endpoint`, tuned as every boxmaker socket (and secured by
    `secure`, a CURVE client's keys, when given)."""
    socket = ctx.socket(zmq.DEALER)
    tune(socket)
    if secure is not None:
        secure(socket)
    socket.connect(endpoint)
    return socket


class _Lazy(Generic[S]):
    """What both clients share: the socket of the current try and how an answer is matched."""

    def __init__(
        self,
        ctx: zmq.Context[S],
        endpoint: str,
        *,
        socket: str,
        name: str | None,
        secure: Secure | None,
    ) -> None:
        self.endpoint = endpoint
        self.socket = socket
        self.name = SERVICE[socket] if name is None else name
        self._ctx = ctx
        self._secure = secure
        self._socket: S | None = None

    def __repr__(self) -> str:
        state = "connected" if self.connected else "idle"
        return f"{type(self).__name__}({self.name} at {self.endpoint}, {state})"

    @property
    def connected(self) -> bool:
        """Whether a socket is open (a try is under way, or the last one was answered)."""
        return self._socket is not None

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close(linger=0)
            self._socket = None

    def _connected(self) -> S:
        if self._socket is None:
            self._socket = dealer(self._ctx, self.endpoint, self._secure)
        return self._socket

    def _answer_in(self, frame: bytes, request: Request) -> object | None:
        """The answer to `request` that `frame` holds; None for an answer to another request."""
        try:
            answer: object = wire.decode(frame)
        except wire.DecodeError as error:
            raise ProtocolError(self.name, str(error)) from None
        if getattr(answer, "id", None) != request.id:
            return None
        if not isinstance(answer, (*answer_of(type(request)), Error)):
            raise WrongAnswer(self.name, request, answer)
        return answer

    def _patience(self, request: Request, given: Patience | None) -> tuple[float, int]:
        each = patience(self.socket, request) if given is None else given
        return each.wait_s(request), each.tries

    def _unreachable(self, tries: int, wait: float) -> Unreachable:
        return Unreachable(
            f"{self.name} did not answer at {self.endpoint} "
            f"({tries} tries, {wait:g} s each); is it running? try `bxctl status`"
        )


class Client(_Lazy[zmq.asyncio.Socket]):
    """The asyncio client: one request at a time (concurrent askers take turns)."""

    def __init__(
        self,
        ctx: zmq.asyncio.Context,
        endpoint: str,
        *,
        socket: str,
        name: str | None = None,
        secure: Secure | None = None,
    ) -> None:
        super().__init__(ctx, endpoint, socket=socket, name=name, secure=secure)
        self._lock = anyio.Lock()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_: object) -> None:
        self.close()

    async def ask(self, request: Asks[A], *, patience: Patience | None = None) -> A | Error:
        """Send `request` and return its answer (`patience`: the caller's own, else the
        table's for the request on this socket)."""
        message = cast(Request, request)
        wait, attempts = self._patience(message, patience)
        payload = wire.encode(message)
        async with self._lock:
            try:
                for _ in range(attempts):
                    socket = self._connected()
                    await socket.send(payload)
                    with anyio.move_on_after(wait):
                        while True:
                            answer = self._answer_in(await socket.recv(), message)
                            if answer is not None:
                                return cast("A | Error", answer)
                    self.close()
            except BaseException:
                self.close()
                raise
        raise self._unreachable(attempts, wait)


class SyncClient(_Lazy["zmq.Socket[bytes]"]):
    """The blocking client. `on_silence`, when given, is called once when the first try has
    waited `silence_s` with no answer (bxctl asks the supervisor then whether waiting is any
    use); it may raise to give up."""

    def __init__(
        self,
        endpoint: str,
        *,
        socket: str,
        name: str | None = None,
        secure: Secure | None = None,
    ) -> None:
        context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        super().__init__(context, endpoint, socket=socket, name=name, secure=secure)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def ask(
        self,
        request: Asks[A],
        *,
        patience: Patience | None = None,
        on_silence: Callable[[], None] | None = None,
        silence_s: float = 1.0,
    ) -> A | Error:
        """Send `request` and return its answer, as `Client.ask` does."""
        message = cast(Request, request)
        wait, attempts = self._patience(message, patience)
        payload = wire.encode(message)
        try:
            for _ in range(attempts):
                socket = self._connected()
                socket.send(payload)
                first = wait if on_silence is None else min(silence_s, wait)
                answer = self._wait_for(socket, message, first)
                if answer is None and on_silence is not None:
                    on_silence()
                    on_silence = None
                    answer = self._wait_for(socket, message, wait - first)
                if answer is not None:
                    return cast("A | Error", answer)
                self.close()
        except BaseException:
            self.close()
            raise
        raise self._unreachable(attempts, wait)

    def _wait_for(
        self, socket: zmq.Socket[bytes], request: Request, timeout: float
    ) -> object | None:
        deadline = time.monotonic() + timeout
        while socket.poll(max(0, math.ceil((deadline - time.monotonic()) * 1000))):
            answer = self._answer_in(socket.recv(), request)
            if answer is not None:
                return answer
        return None
