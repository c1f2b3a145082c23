"""The phone channel's state as the owner sees it (SPEC §21.1): its states, the backoff between
tries, and the report gatewayd writes and `bxctl status` and the console read,
`{run}/matrix.json`.

The states and the backoff are pure (no clock: the time is given). `Report` only writes that
one file, rewritten whole when the state changes; nothing the box decides depends on it.
"""

from __future__ import annotations

import contextlib
import enum
import json
from dataclasses import asdict, dataclass
from typing import Any

from bxcore.home.atomic import write_atomically
from bxcore.home.layout import Home

NAME = "matrix.json"
FIRST_S = 0.5
MOST_S = 30.0


class LinkState(enum.StrEnum):
    STARTING = "starting"  # reaching the homeserver for the first time
    SYNCING = "syncing"  # connected: the room's events arrive
    AWAY = "away"  # the homeserver did not answer, or answered an error: tried again
    FAILED = "failed"  # the channel cannot work until the owner changes something


def backoff_s(failures: int) -> float:
    """Seconds before the next try after `failures` in a row: 0.5 s doubling to 30 s."""
    if failures <= 0:
        return 0.0
    return min(MOST_S, FIRST_S * 2.0 ** min(failures - 1, 16))


@dataclass(frozen=True)
class Link:
    """What the owner reads: the state, why (when not syncing), since when, and the room."""

    state: LinkState
    since: str
    user: str
    room: str
    reason: str = ""
    joined: bool = False
    room_encrypted: bool | None = None

    def line(self) -> str:
        """`matrix: syncing as @box:… in !room:… (encrypted)` and the like, in one line."""
        where = f"as {self.user} in {self.room}"
        if self.room_encrypted is not None and self.joined:
            where += " (encrypted)" if self.room_encrypted else " (not encrypted)"
        elif not self.joined:
            where += " (not joined yet: invite the box from an owner's account)"
        said = f"matrix: {self.state.value} {where} since {self.since}"
        return f"{said}: {self.reason}" if self.reason else said


class Report:
    def __init__(self, home: Home) -> None:
        self._path = home.run / NAME
        self.link: Link | None = None

    def __repr__(self) -> str:
        return f"Report({self._path}: {self.link.state.value if self.link else 'nothing'})"

    def set(self, link: Link) -> None:
        if link == self.link:
            return
        self.link = link
        body = asdict(link) | {"state": link.state.value}
        try:
            write_atomically(self._path, json.dumps(body, sort_keys=True).encode(), durable=False)
        except OSError:  # a report, never an input: only the file is withdrawn
            with contextlib.suppress(OSError):
                self._path.unlink(missing_ok=True)

    def clear(self) -> None:
        with contextlib.suppress(OSError):
            self._path.unlink(missing_ok=True)


def read(home: Home) -> dict[str, Any] | None:
    """What gatewayd last reported of the channel; None when it said nothing."""
    try:
        data = json.loads((home.run / NAME).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_line(home: Home) -> tuple[str, str] | None:
    """The report as one line and its style (`bxctl status`); None when there is none."""
    data = read(home)
    if data is None:
        return None
    try:
        link = Link(**(data | {"state": LinkState(data["state"])}))
    except (TypeError, ValueError, KeyError):
        return None
    style = {LinkState.SYNCING: "", LinkState.FAILED: "red"}.get(link.state, "yellow")
    return link.line(), style
