"""One question to a running daemon, for the commands that only read: the answer, or one
line saying why there is none (an `error` answer included)."""

from __future__ import annotations

from typing import TypeVar

from bxcore.home.layout import Home
from bxcore.wire.messages import Asks, Error
from bxctl.output import fail
from bxctl.owner_link import OwnerLink

A = TypeVar("A")


def ask(home: Home, socket: str, message: Asks[A]) -> A:
    """Send `message` on `socket` and return the answer; an `error` answer fails."""
    with OwnerLink(home, socket) as link:
        answer = link.ask(message)
    if isinstance(answer, Error):
        fail(f"{link.service}: {answer.message} ({answer.code})")
    return answer
