"""The DEALER client every boxmaker process uses to ask another one something (SPEC §3.1).

One request at a time a client; it sends one frame and waits for the answer with the same id.
No answer in time: close the socket, open a new one and send the same request again (the
zguide's "Lazy Pirate"), a few times, then `Unreachable`. Servers are idempotent per id, so a
retry can never make anything happen twice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import zmq
import zmq.asyncio

from bxcore import wire
from bxcore.router import tune


class Unreachable(Exception):
    """The server did not answer; the text names it, the endpoint and what was tried."""


class ProtocolError(Exception):
    """The server answered with something that is not a message."""


class Client:
    def __init__(
        self,
        ctx: zmq.asyncio.Context,
        endpoint: str,
        *,
        name: str,
        timeout: float = 5.0,
        tries: int = 3,
        secure: Callable[[zmq.Socket[Any]], None] | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.name = name
        self.timeout = timeout
        self.tries = tries
        self._ctx = ctx
        self._secure = secure
        self._socket: zmq.asyncio.Socket | None = None
        self._lock = anyio.Lock()

    def __repr__(self) -> str:
        state = "connected" if self._socket is not None else "idle"
        return f"Client({self.name} at {self.endpoint}, {state})"

    def _open(self) -> zmq.asyncio.Socket:
        socket = self._ctx.socket(zmq.DEALER)
        tune(socket)
        if self._secure is not None:
            self._secure(socket)
        socket.connect(self.endpoint)
        return socket

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close(linger=0)
            self._socket = None

    async def request(
        self, message: Any, *, timeout: float | None = None, tries: int | None = None
    ) -> Any:
        """Send `message` and return the answer that carries its id."""
        wait = self.timeout if timeout is None else timeout
        attempts = self.tries if tries is None else tries
        payload = wire.encode(message)
        async with self._lock:
            for _ in range(attempts):
                if self._socket is None:
                    self._socket = self._open()
                socket = self._socket
                await socket.send(payload)
                with anyio.move_on_after(wait):
                    while True:
                        reply = _decode(await socket.recv(), self.name)
                        if getattr(reply, "id", None) == message.id:
                            return reply
                self.close()
        raise Unreachable(
            f"{self.name} did not answer at {self.endpoint} "
            f"({attempts} tries, {wait:g} s each); is it running? try `bxctl status`"
        )


def _decode(frame: bytes, name: str) -> Any:
    try:
        return wire.decode(frame)
    except wire.DecodeError as error:
        raise ProtocolError(f"{name} answered with a bad message: {error}") from None
