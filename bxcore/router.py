"""The ROUTER server loop every daemon runs its sockets with (SPEC §2.3, §3.1).

It receives one frame a request, decodes it strictly, answers `ping` itself, hands every other
message to the service's handler in a task of its own, and sends the one answer back. A frame
that does not decode is answered `bad_message` when its id could be read and dropped
otherwise; a handler that fails is answered `internal`; the loop keeps serving either way.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import zmq
import zmq.asyncio

from bxcore import __version__, wire
from bxcore.clock import now_ms, rfc3339
from bxcore.messages import Error, ErrorCode, Ping, Pong

Handler = Callable[[Any], Awaitable[Any]]

HWM = 10_000
MAX_IN_FLIGHT = 1024

log = logging.getLogger(__name__)


def tune(socket: zmq.Socket[Any], *, linger_ms: int = 0) -> None:
    """The options every boxmaker socket carries: no hanging exit, no oversized frame."""
    socket.setsockopt(zmq.LINGER, linger_ms)
    socket.setsockopt(zmq.MAXMSGSIZE, wire.MAX_MESSAGE)
    socket.setsockopt(zmq.SNDHWM, HWM)
    socket.setsockopt(zmq.RCVHWM, HWM)


class Router:
    """One bound ROUTER socket and the loop that serves it."""

    def __init__(
        self,
        ctx: zmq.asyncio.Context,
        endpoint: str,
        handle: Handler,
        *,
        service: str,
        secure: Callable[[zmq.Socket[Any]], None] | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.service = service
        self._handle = handle
        self._started = rfc3339(now_ms())
        self._served = 0
        self._socket = ctx.socket(zmq.ROUTER)
        tune(self._socket, linger_ms=100)
        self._socket.setsockopt(zmq.ROUTER_MANDATORY, 1)
        if secure is not None:
            secure(self._socket)
        self._socket.bind(endpoint)
        self._limit = anyio.Semaphore(MAX_IN_FLIGHT)

    def __repr__(self) -> str:
        return f"Router({self.service} at {self.endpoint}, served {self._served})"

    def pong(self, request_id: str) -> Pong:
        return Pong(request_id, self.service, os.getpid(), __version__, self._started)

    async def serve(self) -> None:
        """Receive and answer until cancelled; closes the socket on the way out."""
        try:
            async with anyio.create_task_group() as tasks:
                while True:
                    frames = await self._socket.recv_multipart(copy=True)
                    await self._limit.acquire()
                    tasks.start_soon(self._answer, frames)
        finally:
            self._socket.close(linger=100)

    async def _answer(self, frames: list[bytes]) -> None:
        try:
            identity = frames[0]
            reply = await self._reply(frames)
            if reply is not None:
                self._send(identity, wire.encode(reply))
        finally:
            self._limit.release()

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
        try:
            return await self._handle(message)
        except Exception as error:  # keep serving: one request's failure is not the loop's
            log.exception("%s: handling %s failed", self.service, type(message).__name__)
            request_id = getattr(message, "id", None)
            if request_id is None:
                return None
            return Error(request_id, ErrorCode.INTERNAL, f"internal error: {error}"[:300])

    def _send(self, identity: bytes, payload: bytes) -> None:
        try:
            self._socket.send_multipart([identity, payload], flags=zmq.NOBLOCK)
        except zmq.Again:
            log.warning("%s: a client is not reading; its answer was dropped", self.service)
        except zmq.ZMQError as error:
            if error.errno != zmq.EHOSTUNREACH:
                raise
            log.info("%s: a client left before its answer", self.service)
