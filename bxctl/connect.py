"""How bxctl asks a running daemon something: one request on a fresh DEALER, as the owner
(the owner's CURVE key on the admin and gateway sockets), with a deadline.
"""

from __future__ import annotations

from typing import Any

import zmq

from bxcore import curve, wire
from bxcore.config import load_config
from bxcore.home import Home
from bxcore.messages import Error
from bxctl.output import fail

#: The sockets that are CURVE servers, and whose key they hold.
CURVE_SERVERS = {"admin": "brokerd", "gateway": "gatewayd"}
SERVICE_OF = {
    "broker": "brokerd",
    "admin": "brokerd",
    "loop": "loopd",
    "memory": "memoryd",
    "gateway": "gatewayd",
    "supervisor": "the supervisor",
}


def ask(home: Home, socket: str, message: Any, *, timeout_s: float = 10.0) -> Any:
    """Send `message` on `socket` and return the answer; a one-line failure otherwise."""
    endpoint = load_config(home.config).sockets.endpoint(socket, home)
    dealer: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    try:
        if socket in CURVE_SERVERS:
            owner = curve.load_pair(home.keys, "owner")
            server = curve.load_public(home.keys, CURVE_SERVERS[socket])
            curve.connect_curve(dealer, owner, server)
        dealer.connect(endpoint)
        dealer.send(wire.encode(message))
        if not dealer.poll(int(timeout_s * 1000)):
            fail(f"{SERVICE_OF.get(socket, socket)} did not answer at {endpoint}; "
                 "is boxmaker running? try `bxctl up`")  # fmt: skip
        answer = wire.decode(dealer.recv())
    except curve.KeyFileError as error:
        fail(str(error))
    except wire.DecodeError as error:
        fail(f"{SERVICE_OF.get(socket, socket)} answered something unreadable: {error}")
    finally:
        dealer.close(linger=0)
    if isinstance(answer, Error):
        fail(f"{SERVICE_OF.get(socket, socket)}: {answer.message} ({answer.code})")
    return answer
