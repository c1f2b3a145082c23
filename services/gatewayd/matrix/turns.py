"""The phone sessions' turns in their threads (SPEC §21.2): each turn one message, edited in
place as its events come, and still so after gatewayd restarts: the memo keeps where each
session's last turn began and its messages' event ids, and a gatewayd that starts again reads
the rest of that turn (and any after it) from loopd's history, then edits the same messages.

Events that arrive live while a session is being read back wait, so none is shown out of turn.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable

from bxcore.client import AskFailed, Client
from bxcore.ids import descends
from bxcore.visible import visible
from bxcore.wire.messages import Error, HistoryQuery, TurnEvent
from services.gatewayd.matrix.memo import Memo, TurnMark
from services.gatewayd.matrix.outbox import Outbox
from services.gatewayd.matrix.posts import TurnText

log = logging.getLogger("gatewayd")

TURNS_KEPT = 64  # turns whose text is held, to edit it


class Turns:
    def __init__(self, memo: Memo, outbox: Outbox, loop: Client) -> None:
        self._memo = memo
        self._outbox = outbox
        self._loop = loop
        self._texts: dict[tuple[str, int], TurnText] = {}
        # Sessions to read back (`resume`): their live events wait until then.
        self._waiting: dict[str, list[TurnEvent]] = {s: [] for s, _ in memo.turns.items()}

    def __repr__(self) -> str:
        return f"Turns({len(self._texts)} held, {len(self._waiting)} being read back)"

    def thread_of(self, session: str) -> str | None:
        """The thread of `session`, or of the phone session it is a sub-agent of."""
        for root, known in self._memo.threads.items():
            if descends(session, known):
                return root
        return None

    def take(self, event: TurnEvent) -> None:
        waiting = self._waiting.get(event.session)
        if waiting is not None:
            waiting.append(event)
            return
        root = self.thread_of(event.session)
        if root is None:
            return  # not a phone session's
        key = (event.session, event.turn)
        text = self._texts.get(key)
        if text is None:
            text = self._start(event, root)
        for part in text.take(event):
            shown = text.text(part)
            if shown:
                self._outbox.want(("turn", *key, part), shown, thread=root,
                                  on_sent=self._sent(event.session, event.turn, part))  # fmt: skip

    def _start(self, event: TurnEvent, root: str) -> TurnText:
        sub = event.session not in self._memo.threads.values()
        heading = [f"sub-agent {visible(event.session)}:"] if sub else []
        text = self._texts[(event.session, event.turn)] = TurnText(
            event.session, event.turn, [heading]
        )
        while len(self._texts) > TURNS_KEPT:
            del self._texts[next(iter(self._texts))]
        mark = self._memo.turns.get(event.session)
        if mark is None or mark.turn < event.turn:
            self._memo.turns.put(event.session, TurnMark(event.turn, event.seq, ()))
            self._memo.save()
        return text

    def _sent(self, session: str, turn: int, part: int) -> Callable[[str], None]:
        def sent(event_id: str) -> None:
            mark = self._memo.turns.get(session)
            if mark is None or mark.turn != turn or part != len(mark.posts):
                return  # an older turn's, or a part out of order: not needed to go on
            self._memo.turns.put(session, TurnMark(turn, mark.first_seq, (*mark.posts, event_id)))
            self._memo.save()

        return sent

    async def resume(self) -> None:
        """After a restart: each session's last turn read back from loopd from its start, its
        messages edited where they are, and whatever came after it shown."""
        for session, mark in list(self._memo.turns.items()):
            try:
                events = await self._history(session, max(0, mark.first_seq - 1))
            except (AskFailed, ValueError) as error:
                log.warning("matrix: cannot read back %s (%s); its turn goes on in new "
                            "messages", session, error)  # fmt: skip
                events = []
            root = self.thread_of(session)
            if root is not None:
                for part, event_id in enumerate(mark.posts):
                    self._outbox.adopt(("turn", session, mark.turn, part), event_id, root)
            live = self._waiting.pop(session, [])
            for event in [*events, *live]:
                if event.turn >= mark.turn:
                    self.take(event)

    async def _history(self, session: str, after: int) -> list[TurnEvent]:
        events: list[TurnEvent] = []
        while True:
            query = HistoryQuery(f"m-{secrets.token_hex(8)}", session, after or None)
            page = await self._loop.ask(query)
            if isinstance(page, Error):
                raise ValueError(f"loopd refused the history query: {page.message}")
            events += page.events
            if not page.more or not page.events:
                return events
            after = page.events[-1].seq
