"""The owner's line to the box (SPEC §3.1, §3.6): a synchronous DEALER on one of the box's
sockets (on the gateway and admin sockets authenticated with the owner's CURVE key), retried
the Lazy Pirate way.

Synchronous on purpose: `bxctl chat` does one thing at a time (a long poll, then a question
to the owner), so plain blocking calls are the whole of its concurrency. Error answers are
returned, not raised: the caller decides what `already_settled` means to the owner. When the
service does not answer, the supervisor is asked why, and the one line names it (issue 10).
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any, NoReturn

import zmq

from bxcore import curve, wire
from bxcore.config import ConfigError, load_config
from bxcore.home import Home
from bxcore.messages import ServiceInfo
from bxcore.router import tune
from bxctl.output import fail
from bxctl.supervisor_link import down, explain, whereabouts

#: The CURVE sockets the owner speaks on, and whose key each server holds.
SERVERS = {"gateway": "gatewayd", "admin": "brokerd"}
#: Who answers on each socket, for the owner's messages.
SERVICES = {
    **SERVERS,
    "broker": "brokerd",
    "loop": "loopd",
    "memory": "memoryd",
    "supervisor": "the supervisor",
}
NOT_RUNNING = "is boxmaker running? try `bxctl up`"
FIRST_LOOK_S = 1.0  # no answer this soon: ask the supervisor whether waiting is any use


class OwnerLink:
    def __init__(self, home: Home, socket: str) -> None:
        self.home = home
        self.service = SERVICES[socket]
        self._keys: tuple[curve.KeyPair, bytes] | None = None
        try:
            self.endpoint = load_config(home.config).sockets.endpoint(socket, home)
            if socket in SERVERS:
                pair = curve.load_pair(home.keys, "owner")
                self._keys = (pair, curve.load_public(home.keys, SERVERS[socket]))
        except (ConfigError, curve.KeyFileError) as error:
            fail(str(error))
        self._ctx: zmq.Context[Any] = zmq.Context.instance()
        self._socket: zmq.Socket[bytes] | None = None

    def __repr__(self) -> str:
        state = "connected" if self._socket is not None else "idle"
        return f"OwnerLink({self.service} at {self.endpoint}, {state})"

    def __enter__(self) -> OwnerLink:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close(linger=0)
            self._socket = None

    def request(self, message: Any, *, timeout_s: float = 5.0, tries: int = 3) -> Any:
        """Send `message`; its answer (an `error` too). No answer after `tries`: one line
        saying the box does not seem to run, and exit 1."""
        self._check_endpoint()
        payload = wire.encode(message)
        looked = False
        for _ in range(tries):
            if self._socket is None:
                self._socket = self._open()
            self._socket.send(payload)
            first = timeout_s if looked else min(FIRST_LOOK_S, timeout_s)
            answer = self._wait_for(self._socket, message.id, first)
            if answer is None and not looked:
                looked = True
                info = whereabouts(self.home, self.service) if self._supervised else None
                if down(info):
                    self._fail(f"did not answer at {self.endpoint}", info)
                answer = self._wait_for(self._socket, message.id, timeout_s - first)
            if answer is not None:
                return answer
            self.close()  # a lost request or answer: a fresh socket, the same request
        self._fail(f"did not answer at {self.endpoint}")

    def _open(self) -> zmq.Socket[bytes]:
        socket: zmq.Socket[bytes] = self._ctx.socket(zmq.DEALER)
        tune(socket)
        if self._keys is not None:
            curve.connect_curve(socket, *self._keys)
        socket.connect(self.endpoint)
        return socket

    def _wait_for(self, socket: zmq.Socket[bytes], request_id: str, timeout_s: float) -> Any:
        deadline = time.monotonic() + timeout_s
        while socket.poll(max(0, int((deadline - time.monotonic()) * 1000))):
            try:
                answer = wire.decode(socket.recv())
            except wire.DecodeError as error:
                fail(f"{self.service} answered something unreadable: {error}")
            if getattr(answer, "id", None) == request_id:
                return answer
        return None

    def _check_endpoint(self) -> None:
        """A missing ipc socket file means nothing serves there: say so at once."""
        if self.endpoint.startswith("ipc://") and not Path(self.endpoint[6:]).exists():
            self._fail(f"is not running (no socket at {self.endpoint})")

    @property
    def _supervised(self) -> bool:
        return self.service != SERVICES["supervisor"]

    def _fail(self, trouble: str, info: ServiceInfo | None = None) -> NoReturn:
        """One line: what went wrong with the service, and what the supervisor says of it."""
        self.close()
        if info is None and self._supervised:
            info = whereabouts(self.home, self.service)
        fail(explain(self.service, trouble, info))


def request_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(6)}"
