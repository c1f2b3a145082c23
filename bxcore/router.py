"""The ROUTER server loop every daemon runs its sockets with (SPEC §2.3, §3.1).

It receives one frame a request, decodes it strictly, answers `ping` itself, hands every other
message to the socket's dispatch table (`bxcore.routes.Routes`: the handler of its type, else
the socket's refusal) in a task of its own, and sends the one answer back. A frame that does
not decode is answered `bad_message` when its id could be read and dropped otherwise; a
handler that fails is answered `internal`; the loop keeps serving either way.

The socket is a plain pyzmq socket watched through the event loop's reader on its ZMQ_FD,
not a `zmq.asyncio` socket: every request costs a future and several callbacks there, which
was most of brokerd's time per decision (measured: see bench/). ZMQ_FD is edge-triggered, so
the socket is drained until EAGAIN on every wake-up and again after every send, which may
have consumed the edge that announced the next request.

`bind` is how every bound socket of the box is bound: a failure closes the socket at once
(LINGER 0, so the context's end cannot wait for it) and becomes one `SetupError` line that
names the endpoint and, for an `ipc://` path, what is in the way.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable
from typing import Any, cast

import anyio
import zmq

from bxcore import __version__, aio
from bxcore.clock import now_ms, rfc3339
from bxcore.errors import SetupError
from bxcore.routes import Routes
from bxcore.wire import codec as wire
from bxcore.wire.messages import Error, ErrorCode, Ping, Pong

# Plain ints: pyzmq's own constants are enums, and an enum costs its conversion at every call
# (`SNDMORE | NOBLOCK` alone 0.8 us); these are used a few times a request.
IN = int(zmq.POLLIN)
EVENTS = int(zmq.EVENTS)
RCVMORE = int(zmq.RCVMORE)
NOBLOCK = int(zmq.NOBLOCK)
MORE = int(zmq.SNDMORE | zmq.NOBLOCK)
HWM = 10_000
MAX_IN_FLIGHT = 1024
RECONNECT_MS = (10, 1000)  # a peer that is starting is found within 10 ms, backing off to 1 s

log = logging.getLogger(__name__)


def tune(socket: zmq.Socket[Any], *, linger_ms: int = 0) -> None:
    """The options every boxmaker socket carries: no hanging exit, no oversized frame."""
    socket.setsockopt(zmq.LINGER, linger_ms)
    socket.setsockopt(zmq.MAXMSGSIZE, wire.MAX_MESSAGE)
    socket.setsockopt(zmq.SNDHWM, HWM)
    socket.setsockopt(zmq.RCVHWM, HWM)
    socket.setsockopt(zmq.RECONNECT_IVL, RECONNECT_MS[0])
    socket.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_MS[1])


def bind(socket: zmq.Socket[Any], endpoint: str) -> None:
    """Bind `socket` at `endpoint`; else close it (LINGER 0) and raise `SetupError`.

    The socket must have been made by its context (`ctx.socket`), never `zmq.Socket(ctx, …)`:
    only then does `ctx.destroy` close it, and a socket left open makes `ctx.term` wait
    forever (issue 10: gatewayd hung so when a folder stood at its socket path)."""
    try:
        socket.bind(endpoint)
    except zmq.ZMQError as error:
        socket.close(linger=0)
        occupant = _occupant(endpoint)
        reason = zmq.strerror(error.errno) if error.errno else str(error)
        raise SetupError(bind_failure(endpoint, reason, occupant)) from None


def bind_failure(endpoint: str, reason: str, occupant: str | None) -> str:
    """The one line a failed bind becomes. Pure."""
    text = f"cannot bind {endpoint}: {reason}"
    if occupant is not None:
        text += f" ({occupant} is at that path; move it away)"
    return text


def _occupant(endpoint: str) -> str | None:
    """What stands at an `ipc://` endpoint's path, when it is not a socket."""
    if not endpoint.startswith("ipc://"):
        return None
    try:
        mode = os.lstat(endpoint[len("ipc://") :]).st_mode
    except OSError:
        return None
    if stat.S_ISSOCK(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a folder"
    return "a symlink" if stat.S_ISLNK(mode) else "a file that is not a socket"


class Router:
    """One bound ROUTER socket and the loop that serves it."""

    def __init__(
        self,
        ctx: zmq.Context[Any],
        endpoint: str,
        routes: Routes[Any],
        *,
        service: str,
        secure: Callable[[zmq.Socket[Any]], None] | None = None,
        ready: anyio.Event | None = None,
        early: tuple[type[Any], ...] = (),
    ) -> None:
        """`ready`, when given, holds every request but `ping` (and the `early` types, which
        say how the loading goes) until it is set: a daemon that loads before it can answer
        (brokerd's ledger) is seen alive while it loads."""
        self.endpoint = endpoint
        self.service = service
        self._routes = routes
        self._ready = ready
        self._early = early
        self._started = rfc3339(now_ms())
        self._served = 0
        # Plain, not zmq.asyncio (see above), yet made by the context, which closes it at the end.
        self._socket: zmq.Socket[bytes] = ctx.socket(zmq.ROUTER, socket_class=zmq.Socket)
        tune(self._socket, linger_ms=100)
        self._socket.setsockopt(zmq.ROUTER_MANDATORY, 1)
        if secure is not None:
            secure(self._socket)
        bind(self._socket, endpoint)
        self._in_flight = 0
        self._tasks: set[aio.Task[None]] = set()
        self._loop: aio.Loop | None = None
        self._draining = False
        self._stopping = False
        self._look_pending = False

    def __repr__(self) -> str:
        return f"Router({self.service} at {self.endpoint}, served {self._served})"

    @property
    def in_flight(self) -> int:
        """Requests taken and not yet answered."""
        return self._in_flight

    def pong(self, request_id: str) -> Pong:
        return Pong(request_id, self.service, os.getpid(), __version__, self._started)

    async def serve(self) -> None:
        """Receive and answer until cancelled; then cancel what is in flight and close."""
        self._loop = aio.loop()
        fd = self._socket.fileno()
        self._loop.add_reader(fd, self._drain)
        self._loop.call_soon(self._drain)
        try:
            await anyio.sleep_forever()
        finally:
            self._loop.remove_reader(fd)
            self._stopping = True  # what arrives now is left unread: it would outlive serve()
            for task in list(self._tasks):
                task.cancel()
            with anyio.CancelScope(shield=True):
                await aio.wait_all(self._tasks)
            self._socket.close(linger=100)

    def _drain(self) -> None:
        """Take every request that is waiting, each into a task of its own."""
        if self._draining or self._stopping or self._socket.closed:
            return
        self._draining = True
        try:
            # ZMQ_EVENTS both says whether a request waits and re-arms the edge of ZMQ_FD.
            while self._in_flight < MAX_IN_FLIGHT and self._waiting():
                frames = self._receive()
                self._in_flight += 1
                assert self._loop is not None
                task = aio.spawn(self._answer(frames))
                self._tasks.add(task)  # it takes itself out when done
        finally:
            self._draining = False

    def _waiting(self) -> bool:
        events = cast(int, self._socket.getsockopt(EVENTS))
        return bool(events & IN)

    def _receive(self) -> list[bytes]:
        """One waiting request's frames (`recv_multipart`, with plain ints)."""
        frames = [self._socket.recv(NOBLOCK)]
        while self._socket.getsockopt(RCVMORE):
            frames.append(self._socket.recv(NOBLOCK))
        return frames

    async def _answer(self, frames: list[bytes]) -> None:
        try:
            reply = await self._reply(frames)
            if reply is not None:
                self._send(frames[0], wire.encode(reply))
        finally:
            self._in_flight -= 1
            self._tasks.discard(aio.current_task())
            self._look_again()

    def _look_again(self) -> None:
        """A send may have taken the read edge of ZMQ_FD: look at the socket again before the
        loop next waits, once for all the answers sent in this turn of the loop."""
        if not self._look_pending and self._loop is not None:
            self._look_pending = True
            self._loop.call_soon(self._looked)

    def _looked(self) -> None:
        self._look_pending = False
        self._drain()

    async def _reply(self, frames: list[bytes]) -> Any:
        if len(frames) != 2:
            log.warning("%s: dropped a request of %d frames", self.service, len(frames) - 1)
            return None
        try:
            message = wire.decode(frames[1])
        except wire.DecodeError as error:
            log.info("%s: bad message: %s", self.service, error)
            if error.id is None:
                return None
            return Error(error.id, ErrorCode.BAD_MESSAGE, str(error))
        self._served += 1
        if isinstance(message, Ping):
            return self.pong(message.id)
        if (
            self._ready is not None
            and not self._ready.is_set()
            and type(message) not in self._early
        ):
            await self._ready.wait()  # waiting on a set event would still cost a turn
        try:
            return await self._routes.dispatch(message)
        except Exception as error:  # keep serving: one request's failure is not the loop's
            log.exception("%s: handling %s failed", self.service, type(message).__name__)
            request_id = getattr(message, "id", None)
            if request_id is None:
                return None
            return Error(request_id, ErrorCode.INTERNAL, f"internal error: {error}"[:300])

    def _send(self, identity: bytes, payload: bytes) -> None:
        try:
            self._socket.send(identity, MORE)
            self._socket.send(payload, NOBLOCK)
        except zmq.Again:
            log.warning("%s: a client is not reading; its answer was dropped", self.service)
        except zmq.ZMQError as error:
            if error.errno != zmq.EHOSTUNREACH:
                raise
            log.info("%s: a client left before its answer", self.service)
