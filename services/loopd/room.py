"""What loopd tells the owner when a session's history cannot be written (issue 28): the
`error` event of a turn it stopped, the result a call of that turn reads, and the refusal of
an owner message while the sessions' disk is full (`refusal`, which reads its free space; the
sentences are pure).
"""

from __future__ import annotations

from pathlib import Path

from bxcore.home import disk


def _next(room: bool) -> str:
    return "Free some space and" if room else "See `bxctl logs loopd`, then"


def turn_stopped(why: str, *, room: bool) -> str:
    """The `error` event of a turn whose history could not be written."""
    return f"{why}; the turn stopped. {_next(room)} send the message again."


def not_taken(why: str, *, room: bool) -> str:
    """The answer to an owner message that could not be written."""
    return f"{why}, so the message was not taken. {_next(room)} send it again."


def call_stopped(said: str) -> str:
    """What the model reads for a call a stopped turn left without a result (`said`: the
    turn's `error` event)."""
    return f"Error: this call's result could not be kept: {said}"


def refusal(folder: Path) -> str | None:
    """The answer to an owner message while the disk holding `folder` is full; None while it
    has room (the message is written, and its write says whether it fits)."""
    free = disk.free_bytes(folder)
    if not disk.is_full(free):
        return None
    return not_taken(disk.full(folder, free), room=True)
