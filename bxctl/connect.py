"""One question to a running daemon, for the commands that only read: the answer, or one
line saying why there is none (an `error` answer included)."""

from __future__ import annotations

from bxcore.client import Request
from bxcore.home import Home
from bxcore.messages import Error
from bxctl.output import fail
from bxctl.owner_link import OwnerLink


def ask(home: Home, socket: str, message: Request, *, timeout_s: float = 5.0) -> object:
    """Send `message` on `socket` and return the answer; an `error` answer fails."""
    with OwnerLink(home, socket) as link:
        answer = link.request(message, timeout_s=timeout_s)
    if isinstance(answer, Error):
        fail(f"{link.service}: {answer.message} ({answer.code})")
    return answer
