"""Every session loopd knows (SPEC §10, issue 10): a summary of each (its turns, when it was
last written, its tokens) for the session list, and a bounded cache of loaded histories, each
loaded when a turn or a new owner message needs it and let go once idle. History pages are read
from the files. What it holds does not grow with the histories, only with the number of
sessions. Its scan at start gives the day's tally (`usage.Tally`) every answer's cost. A history
let go while it owes records to its file (a turn's end a full disk kept out, issue 28) is kept
aside and taken again, never loaded afresh without them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import NamedTuple

from bxcore.clock import parse_rfc3339
from bxcore.home.layout import Home
from bxcore.ids import valid_session
from bxcore.wire.messages import TurnEvent
from services.loopd.cache import Cache
from services.loopd.history import SessionLog
from services.loopd.history_kept import CONTEXT_CHARS
from services.loopd.history_scan import outline, read_events
from services.loopd.usage import Tally

# The idle histories kept: 64 at most, 4 MiB at most by their `SessionLog.weight` (what they hold
# in memory, which no longer grows with their files, issue 28). Histories a turn is using are
# held on top of that, each at most its context's worth (`[loop] context_chars`) and its turn.
MAX_LOADED = 64
MAX_LOADED_BYTES = 4 * 1024 * 1024


class Summary(NamedTuple):
    """What the session list says of a session that is not loaded."""

    turns: int
    updated: str
    tokens: int | None = None  # what its answers cost (None: no server said)


class Sessions:
    """The sessions of one home. `get` is for use at once (before the next `await`); a turn
    holds its session (`hold`/`release`, or `held`) so that no one loads a second copy."""

    def __init__(
        self,
        home: Home,
        *,
        max_loaded: int = MAX_LOADED,
        max_bytes: int = MAX_LOADED_BYTES,
        tally: Tally | None = None,
        context: int = CONTEXT_CHARS,
    ) -> None:
        self._home = home
        self._context = context  # `[loop] context_chars`: what each log keeps
        self._tally = tally  # what `scan` finds spent is added to it
        self._summaries: dict[str, Summary] = {}  # stale while loaded: the log is the truth
        self._loaded: Cache[SessionLog] = Cache(max_loaded, max_bytes)
        self._owing: dict[str, SessionLog] = {}  # let go with records not yet written

    def __repr__(self) -> str:
        return f"Sessions({len(self.names())} known, {self._loaded!r})"

    def scan(self) -> list[tuple[str, int]]:
        """Summarise every history on disk from its outline, keeping none loaded; the sessions
        with a turn a crash cut off, and that turn, except sub-agents (their parent resumes
        them). Each answer's cost is added to the tally."""
        folder = self._home.sessions
        names = sorted(p.stem for p in folder.glob("*.jsonl")) if folder.exists() else []
        unfinished: list[tuple[str, int]] = []
        children: set[str] = set()
        for name in names:
            if not valid_session(name) or name in self._loaded:
                continue
            found = outline(name, self._home.session_history(name))
            self._summaries[name] = Summary(found.turns, found.updated, found.tokens)
            if self._tally is not None:
                self._count(self._tally, found.spent)
            children.update(found.children)
            if found.unfinished:
                unfinished.append((name, found.unfinished))
        return [(name, turn) for name, turn in unfinished if name not in children]

    @staticmethod
    def _count(tally: Tally, spent: tuple[tuple[str, int], ...]) -> None:
        for at, tokens in spent:
            try:
                tally.add(parse_rfc3339(at), tokens)
            except ValueError:  # not a time loopd wrote: counted on no day
                continue

    def names(self) -> list[str]:
        return sorted(self._summaries.keys() | set(self._loaded))

    def summary(self, name: str) -> Summary:
        loaded = self._loaded.peek(name)
        if loaded is not None:
            return Summary(loaded.turns, loaded.updated, loaded.tokens)
        return self._summaries[name]

    def exists(self, name: str) -> bool:
        """True when `session` has a history: on disk, or loaded and not empty."""
        loaded = self._loaded.peek(name)
        if loaded is not None and (loaded.size or loaded.owing):
            return True
        return self._home.session_history(name).exists()

    def get(self, name: str) -> SessionLog:
        """The session's history, loaded if it was not; for use before the next `await`."""
        found = self._loaded.get(name)
        if found is None:
            found = self._load(name)
            self._let_go(self._loaded.add(name, found, found.weight))
        return found

    def hold(self, name: str) -> SessionLog:
        """The session's history, kept loaded until `release`: the one copy every user of the
        session sees while a turn runs."""
        if name in self._loaded:
            return self._loaded.hold(name)
        found = self._load(name)
        self._let_go(self._loaded.add(name, found, found.weight, hold=True))
        return found

    def _load(self, name: str) -> SessionLog:
        owing = self._owing.pop(name, None)
        return owing or SessionLog.load(name, self._home.session_history(name), self._context)

    def release(self, name: str) -> None:
        found = self._loaded.peek(name)
        if found is None:
            raise KeyError(f"{name} is not held")
        self._let_go(self._loaded.release(name, found.weight))

    @contextlib.contextmanager
    def held(self, name: str) -> Iterator[SessionLog]:
        found = self.hold(name)
        try:
            yield found
        finally:
            self.release(name)

    def page(self, name: str, after: int, budget: int) -> tuple[list[TurnEvent], bool]:
        """Events past seq `after`, read from the file, until the next would take the page past
        `budget` bytes (each event counted twice: it is escaped once more inside the page), at
        least one; and whether more follow."""
        events: list[TurnEvent] = []
        size = 0
        with contextlib.closing(read_events(self._home.session_history(name), after)) as found:
            for event, length in found:
                size += length * 2
                if size > budget and events:  # a page holds at least one: paging goes on
                    return events, True
                events.append(event)
        return events, False

    def _let_go(self, gone: list[SessionLog]) -> None:
        for each in gone:
            self._summaries[each.session] = Summary(each.turns, each.updated, each.tokens)
            if each.owing:
                self._owing[each.session] = each
