"""What the phone channel remembers across restarts, `{home}/matrix/channel.json` (0600): each
thread's session, each card's approval and outcome, each session's last turn and its messages,
and the events already acted on, so that a gatewayd killed and started again acts on no event
twice and edits the messages it had posted (SPEC §21).

The only writer of that file. It is written whole, atomically and durably, before the event it
records is acted on: a crash between the two loses that event's effect rather than doubling
it. A file that cannot be read is set aside (`channel.json.bad`) and the channel starts afresh.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bxcore.bounded import Bounded
from bxcore.clock import now_ms
from bxcore.home.atomic import write_atomically
from services.gatewayd.matrix.intake import Card

log = logging.getLogger("gatewayd")

ACTED_KEPT = 4096  # event ids acted on, newest kept
TURNS_KEPT = 256  # sessions whose last turn is marked
CARDS_KEPT = 2048
NAME = "channel.json"


@dataclass(frozen=True)
class TurnMark:
    """A session's last turn shown: its number, the seq of its first event, and the event ids
    of its messages, in order."""

    turn: int
    first_seq: int
    posts: tuple[str, ...]


class Memo:
    def __init__(self, folder: Path) -> None:
        self._path = folder / NAME
        self.threads: dict[str, str] = {}  # thread root event id → session
        self.next_session = 1
        self.cards: Bounded[str, Card] = Bounded(CARDS_KEPT)  # card event id → card
        self.acted: Bounded[str, None] = Bounded(ACTED_KEPT)
        self.turns: Bounded[str, TurnMark] = Bounded(TURNS_KEPT)  # session → its last turn
        self.since_ms = now_ms()  # when the box first listened: older events are never acted on
        if not self._read():
            self.save()  # `since_ms` holds from the first start on

    def __repr__(self) -> str:
        return (
            f"Memo({self._path}: {len(self.threads)} threads, {len(self.cards)} cards, "
            f"{len(self.acted)} acted)"
        )

    def card_of(self, approval: str) -> str | None:
        """The event id of `approval`'s card, if one was posted."""
        for event, card in self.cards.items():
            if card.approval == approval:
                return event
        return None

    def new_session(self, root: str) -> str:
        session = f"mx-{self.next_session}"
        self.next_session += 1
        self.threads[root] = session
        return session

    def save(self) -> None:
        body = {
            "threads": self.threads,
            "next_session": self.next_session,
            "cards": {event: asdict(card) for event, card in self.cards.items()},
            "acted": [event for event, _ in self.acted.items()],
            "turns": {session: asdict(mark) for session, mark in self.turns.items()},
            "since_ms": self.since_ms,
        }
        write_atomically(self._path, json.dumps(body, sort_keys=True).encode())

    def _read(self) -> bool:
        """Whether the file was there and read (one that cannot be read is set aside)."""
        try:
            body: Any = json.loads(self._path.read_bytes())
            threads = {str(k): str(v) for k, v in body["threads"].items()}
            next_session = int(body["next_session"])
            cards = [(str(k), Card(**v)) for k, v in body["cards"].items()]
            acted = [str(event) for event in body["acted"]]
            since_ms = int(body["since_ms"])
            turns = [
                (str(k), TurnMark(int(v["turn"]), int(v["first_seq"]), tuple(map(str, v["posts"]))))
                for k, v in body.get("turns", {}).items()
            ]
        except FileNotFoundError:
            return False
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            log.warning("%s cannot be read (%s); set aside, starting afresh", self._path, error)
            os.replace(self._path, self._path.with_suffix(".json.bad"))
            return False
        self.threads, self.next_session, self.since_ms = threads, next_session, since_ms
        for event, card in cards:
            self.cards.put(event, card)
        for event in acted:
            self.acted.put(event, None)
        for session, mark in turns:
            self.turns.put(session, mark)
        return True
