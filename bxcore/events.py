"""Event streams (SPEC §2.3): a PUB socket that never blocks its daemon, and a SUB socket.

PUB/SUB may drop messages, so a subscriber that (re)connects asks for the current state
before it trusts the stream; a publisher whose subscribers are slow drops, never waits.
"""

from __future__ import annotations

import logging
from typing import Any

import zmq
import zmq.asyncio

from bxcore.router import bind, tune
from bxcore.wire import codec as wire

log = logging.getLogger(__name__)


class Publisher:
    def __init__(self, ctx: zmq.Context[Any], endpoint: str, *, service: str) -> None:
        self.endpoint = endpoint
        self.service = service
        self.sent = 0
        self.dropped = 0
        # Plain: sends never wait. Made by the context, which closes it at the end.
        self._socket: zmq.Socket[bytes] = ctx.socket(zmq.PUB, socket_class=zmq.Socket)
        tune(self._socket)
        bind(self._socket, endpoint)

    def __repr__(self) -> str:
        return f"Publisher({self.service} at {self.endpoint}, {self.sent} sent)"

    def publish(self, message: Any) -> None:
        try:
            self._socket.send(wire.encode(message), flags=zmq.NOBLOCK)
            self.sent += 1
        except zmq.Again:
            self.dropped += 1

    def close(self) -> None:
        self._socket.close(linger=0)
