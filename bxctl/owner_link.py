"""The owner's line to the box (SPEC §3.1, §3.6): `bxcore.client.SyncClient` on one of the
box's sockets named by the config (on the gateway and admin sockets authenticated with the
owner's CURVE key), each failure turned into the one line the owner reads.

Synchronous on purpose: `bxctl chat` does one thing at a time (a long poll, then a question
to the owner), so plain blocking calls are the whole of its concurrency. Error answers are
returned, not raised: the caller decides what `already_settled` means to the owner. When the
service does not answer, the supervisor is asked why, and the one line names it (issue 10).
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import NoReturn, TypeVar

from bxcore import curve
from bxcore.client import AskFailed, ProtocolError, Secure, SyncClient, Unreachable
from bxcore.config.file import ConfigError, load_config
from bxcore.home.layout import Home
from bxcore.wire.asking import SERVICE, Patience
from bxcore.wire.messages import Asks, Error, ServiceInfo
from bxctl.output import fail
from bxctl.supervisor.link import down, explain, whereabouts

#: The CURVE sockets the owner speaks on, and whose key each server holds.
SERVERS = {"gateway": "gatewayd", "admin": "brokerd"}
A = TypeVar("A")
FIRST_LOOK_S = 1.0  # no answer this soon: ask the supervisor whether waiting is any use


class OwnerLink:
    def __init__(self, home: Home, socket: str) -> None:
        self.home = home
        self.service = SERVICE[socket]
        secure: Secure | None = None
        try:
            self.endpoint = load_config(home.config).sockets.endpoint(socket, home)
            if socket in SERVERS:
                secure = as_owner(home, SERVERS[socket])
        except (ConfigError, curve.KeyFileError) as error:
            fail(str(error))
        self._client = SyncClient(self.endpoint, socket=socket, secure=secure)

    def __repr__(self) -> str:
        state = "connected" if self._client.connected else "idle"
        return f"OwnerLink({self.service} at {self.endpoint}, {state})"

    def __enter__(self) -> OwnerLink:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def ask(self, message: Asks[A], patience: Patience | None = None) -> A | Error:
        """Send `message` (as patiently as `bxcore.wire.asking` says, unless `patience`); its
        answer (an `error` too). No answer: one line saying the box does not seem to run, and
        exit 1."""
        self._check_endpoint()
        try:
            return self._client.ask(
                message, patience=patience, on_silence=self._look, silence_s=FIRST_LOOK_S
            )
        except Unreachable:
            self._fail(f"did not answer at {self.endpoint}")
        except ProtocolError as error:
            fail(f"{self.service} answered something unreadable: {error.reason}")
        except AskFailed as error:  # a wrong answer
            fail(str(error))

    def _look(self) -> None:
        """No answer yet: when the supervisor says the service will not run unless the owner
        acts, waiting is no use, so say so now."""
        info = whereabouts(self.home, self.service) if self._supervised else None
        if down(info):
            self._fail(f"did not answer at {self.endpoint}", info)

    def _check_endpoint(self) -> None:
        """A missing ipc socket file means nothing serves there: say so at once."""
        if self.endpoint.startswith("ipc://") and not Path(self.endpoint[6:]).exists():
            self._fail(f"is not running (no socket at {self.endpoint})")

    @property
    def _supervised(self) -> bool:
        return self.service != SERVICE["supervisor"]

    def _fail(self, trouble: str, info: ServiceInfo | None = None) -> NoReturn:
        """One line: what went wrong with the service, and what the supervisor says of it."""
        self.close()
        if info is None and self._supervised:
            info = whereabouts(self.home, self.service)
        fail(explain(self.service, trouble, info))


def as_owner(home: Home, server: str) -> Secure:
    """What makes a socket a CURVE client with the owner's key, of `server`'s key."""
    pair = curve.load_pair(home.keys, "owner")
    public = curve.load_public(home.keys, server)
    return lambda socket: curve.connect_curve(socket, pair, public)


def request_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(6)}"
