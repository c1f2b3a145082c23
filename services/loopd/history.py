"""A session's history (SPEC §10.1, §10.6): `{home}/sessions/<session>.jsonl`, one line each,
appended and fsynced before anything that depends on it.

Two sorts of line: `turn_event` (what the owner sees, §10.4) and loopd's own transcript
records, which hold what the model said and read, so that a restart can rebuild the
conversation and resume a turn that was cut off, and what each answer cost (the records and
their lines are `history_records`'). Reading a file's outline (for loopd's start) and its events
(for a history page) without loading it whole is `history_scan`'s. loopd is the only writer of
`{home}/sessions/`.

A line that cannot be read is passed over, never cut with all that follows, except a torn last
line. Records are written whole or not at all (`history_write`, issue 28), and a turn's number
is never used twice, however the file was damaged (`next_turn`).

What a log keeps in memory is bounded by `[loop] context_chars` (issue 28): only the turns the
model is still sent (`history_kept`) and a few figures of the rest; everything else is read
from the file when asked.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bxcore.clock import now_ms, rfc3339
from bxcore.wire.messages import EndReason, Event, OwnerSaid, TurnEvent
from services.loopd.core.turn import final_answer, open_calls
from services.loopd.core.turn_events import SentCall
from services.loopd.history_kept import CONTEXT_CHARS, KeptTurns, TurnSummary
from services.loopd.history_records import ModelReply, Record, Spawned, decode, line_of
from services.loopd.history_write import HistoryUnwritable, append_whole
from services.loopd.model import Message

log = logging.getLogger("loopd")

# A turn's or an event's number in a line that cannot be read: a key's own quote is bare, one
# inside a JSON string is escaped (`\"turn\":`), so no text of the model's matches.
_NUMBERED = re.compile(rb'"(turn|seq)":([0-9]{1,15})[,}]')


@dataclass(frozen=True, slots=True)
class Outline:
    """What loopd's start needs of a history: the newest turn, the oldest turn not ended (0:
    none), the sub-agents it spawned, when the file was last written, and what each model
    answer cost (`at` and tokens, read once for the day's tally, not kept)."""

    turns: int
    unfinished: int
    children: tuple[str, ...]
    updated: str
    spent: tuple[tuple[str, int], ...] = ()

    @property
    def tokens(self) -> int | None:
        """The session's tokens in all; None when no answer said its cost."""
        return sum(n for _, n in self.spent) if self.spent else None


@dataclass
class SessionLog:
    """One session's history file and what loopd knows from it: the turns the model may still
    be sent (`KeptTurns`), and a few figures of the whole, kept as records are taken, at load
    and at each append."""

    session: str
    path: Path
    context: int = CONTEXT_CHARS  # `[loop] context_chars`
    seq: int = 0
    turns: int = 0  # the newest turn an owner message started
    spawns: dict[str, str] = field(default_factory=dict)  # call id -> child session
    updated: str = ""  # when the file was last written
    size: int = 0  # the file's length in bytes
    spent: list[tuple[str, int]] = field(default_factory=list)  # each answer's (at, tokens)
    write: Callable[[int, bytes], int] = field(default=os.write, repr=False)  # os.write; a seam
    _top: int = field(default=0, init=False)  # the highest turn number the history holds
    _owed: list[bytes] = field(default_factory=list, init=False)  # taken, not yet written
    _kept: KeptTurns = field(init=False)  # the turns kept in memory

    def __post_init__(self) -> None:
        self._kept = KeptTurns(self.context)

    def __repr__(self) -> str:
        return f"SessionLog({self.session}: {self.turns} turns, {self._kept!r})"

    @classmethod
    def load(cls, session: str, path: Path, context: int = CONTEXT_CHARS) -> SessionLog:
        """Read the file. A torn last line (no newline: a crash mid-write, as each record is
        written with its newline at once) is cut off; any other line that cannot be read is
        passed over and kept, and so is every line after it."""
        found = cls(session, path, context)
        try:
            with open(path, "rb") as file:
                data = file.read()
                written = os.fstat(file.fileno()).st_mtime_ns // 1_000_000
        except FileNotFoundError:
            return found
        whole = data.rfind(b"\n") + 1  # the torn rest, if any, is data[whole:]
        bad = 0
        for line in data[:whole].split(b"\n"):
            if not line:
                continue
            try:
                record = decode(line)
            except ValueError:
                bad += 1
                found._count_numbers(line)
                continue
            found._take(record)
        if bad:
            log.warning("%s: passed over %d history lines that cannot be read", session, bad)
        found.size = whole
        if whole < len(data):
            with open(path, "r+b") as file:
                file.truncate(whole)
                os.fsync(file.fileno())
        found.updated = rfc3339(written)
        return found

    def _count_numbers(self, line: bytes) -> None:
        """A line that cannot be read (two records glued before issue 28) may hold a turn and
        an event: their numbers are never used again."""
        for key, number in _NUMBERED.findall(line):
            if key == b"turn":
                self._top = max(self._top, int(number))
            else:
                self.seq = max(self.seq, int(number))

    @property
    def next_turn(self) -> int:
        """The next owner message's turn: past every turn number the history holds (a line that
        cannot be read too), so no message is taken into a turn that has begun or ended."""
        return self._top + 1

    @property
    def owing(self) -> bool:
        """Whether records were taken that are not written yet (`append(owe=True)`)."""
        return bool(self._owed)

    def _take(self, record: Record) -> None:
        self._top = max(self._top, record.turn)
        if isinstance(record, TurnEvent):
            self.seq = max(self.seq, record.seq)
            if isinstance(record.event, OwnerSaid):
                self.turns = max(self.turns, record.turn)
        elif isinstance(record, ModelReply) and record.usage is not None:
            self.spent.append((record.usage.at, record.usage.tokens))
        elif isinstance(record, Spawned):
            self.spawns[record.call] = record.child
        self._kept.take(record)

    def append(self, record: Record, *, owe: bool = False) -> None:
        """Write one record durably, then remember it; `RecordTooLarge` (and nothing written)
        when its line could not be read back; `HistoryUnwritable` when it could not be written
        (the file as it was). With `owe`, one that cannot be written is remembered all the
        same, and written before the next that can be (a turn's end the owner was shown)."""
        line = line_of(record)
        try:
            data = b"".join([*self._owed, line])
            self.size = append_whole(self.path, self.size, data, self.write)
            self._owed.clear()
        except HistoryUnwritable:
            if not owe:
                raise
            self._owed.append(line)
        self._take(record)
        self.updated = rfc3339(now_ms())

    def event(self, turn: int, event: Event, *, owe: bool = False) -> TurnEvent:
        """Record an event of `turn` with the session's next seq (`owe`: as `append`)."""
        record = TurnEvent(self.session, turn, self.seq + 1, event)
        self.append(record, owe=owe)
        return record

    def outline(self) -> Outline:
        """What `history_scan.outline` reads of the file, from what is loaded."""
        first = min(self.unfinished(), default=0)
        children = tuple(self.spawns.values())
        return Outline(self.turns, first, children, self.updated, tuple(self.spent))

    @property
    def owner_text(self) -> dict[int, str]:
        """The owner's words of each turn kept, by turn."""
        return self._kept.owner_text

    def unfinished(self) -> list[int]:
        """Turns started by the owner and not yet ended, oldest first."""
        return self._kept.unfinished()

    def ended(self, turn: int) -> bool:
        """True when `turn` has a `turn_end` (a turn let go had ended, or never began)."""
        return self._kept.ended(turn)

    @property
    def weight(self) -> int:
        """About how many bytes of memory this log holds: what `Sessions` counts."""
        return self._kept.weight

    def transcript(self, up_to: int) -> list[Message]:
        """What the model is sent for turn `up_to` (`KeptTurns.transcript`)."""
        return self._kept.transcript(up_to)

    def reply_calls(self, turn: int) -> tuple[SentCall, ...]:
        """Every call of `turn`'s last model reply, in the model's order (none: no reply)."""
        reply = self._turn(turn).reply
        return reply.calls if reply is not None else ()

    def open_calls(self, turn: int) -> list[tuple[SentCall, bool]]:
        """The calls of `turn`'s last model reply that have no result yet (after a crash),
        each with whether the owner was already shown its `tool_called` event (calls run one
        after another, so the first `calls_shown` were: `core.turn.open_calls`)."""
        found = self._turn(turn)
        if found.reply is None:
            return []
        return open_calls(found.reply.calls, found.answered, found.calls_shown)

    def final_answer(self, turn: int) -> tuple[str, bool] | None:
        """When `turn`'s last model reply called no tool, the turn only lacks its end (a crash
        came first): that reply's text, and whether the owner was shown it. Else None
        (`core.turn.final_answer`)."""
        found = self._turn(turn)
        if found.reply is None:
            return None
        return final_answer(found.reply.text, found.reply.calls, found.text_shown)

    @property
    def tokens(self) -> int | None:
        """The session's tokens in all; None when no answer said its cost."""
        return sum(n for _, n in self.spent) if self.spent else None

    def turn_tokens(self, turn: int) -> int | None:
        """What `turn`'s answers cost; None when none said."""
        return self._turn(turn).tokens

    def steps(self, turn: int) -> int:
        """How many times the model has answered in `turn`."""
        return self._turn(turn).steps

    def failure(self, turn: int) -> str | None:
        """Why `turn` ended with an error (its last `error` event), or None if it did not."""
        found = self._turn(turn)
        return (found.error or "no reason was given") if found.failed else None

    def stopped(self, turn: int) -> bool:
        """True when the owner stopped `turn` (it ended `cancelled`)."""
        return self._turn(turn).stopped

    def end_reason(self, turn: int) -> EndReason | None:
        """How `turn` ended (its last `turn_end`), or None while it has not."""
        return self._turn(turn).end

    def last_text(self, turn: int) -> str:
        """The model's last words in `turn` (a sub-agent's answer)."""
        reply = self._turn(turn).reply
        return reply.text if reply is not None else ""

    def _turn(self, turn: int) -> TurnSummary:
        return self._kept.turn(turn)
