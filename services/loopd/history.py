"""A session's history (SPEC §10.1, §10.6): `{home}/sessions/<session>.jsonl`, one line each,
appended and fsynced before anything that depends on it.

Two sorts of line: `turn_event` (what the owner sees, §10.4) and loopd's own transcript
records (`model_reply`, `tool_result`, `spawned`), which hold what the model said and read,
so that a restart can rebuild the conversation and resume a turn that was cut off, and what
each answer cost (`Spent`: the figures of a turn, a session and a day, issue 16). Reading a
file's outline (for loopd's start) and its events (for a history page) without loading it
whole is `history_scan`'s. loopd is the only writer of `{home}/sessions/`.

A line is never longer than one that can be read back (`MAX_LINE`, the wire's limit); a line
that cannot be read is passed over, never cut with all that follows, except a torn last line.
Records are written whole or not at all (`history_write`, issue 28), and a turn's number is
never used twice, however the file was damaged (`next_turn`).

What a log keeps in memory is bounded by `[loop] context_chars` (issue 28): only the turns the
model is still sent (`transcript`: the newest whole turns that fit, the turn that runs always
whole) and a few figures of the rest; everything else is read from the file when asked.
"""

from __future__ import annotations

import bisect
import logging
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from bxcore.clock import now_ms, rfc3339
from bxcore.config.file import LoopConfig
from bxcore.wire import codec as wire
from bxcore.wire import schema
from bxcore.wire.messages import (
    AssistantText,
    EndReason,
    Event,
    OwnerSaid,
    ToolCalled,
    TurnEnd,
    TurnError,
    TurnEvent,
)
from services.loopd.core.turn import final_answer, open_calls
from services.loopd.core.turn_events import SentCall
from services.loopd.history_write import HistoryUnwritable, append_whole
from services.loopd.model import Assistant, Message, ToolCall, ToolResult, User

log = logging.getLogger("loopd")

MAX_LINE = wire.MAX_MESSAGE  # `decode` reads no longer line
CONTEXT_CHARS = LoopConfig().context_chars
# Bytes a log holds beside its messages' text, for `SessionLog.weight` (measured with tracemalloc
# on logs of 1 to 240 short turns: 0.85 to 1.5 KB a turn, ~2 KB a log).
WEIGHT_OF_TURN = 1_536
WEIGHT_OF_LOG = 3_072
# A turn's or an event's number in a line that cannot be read: a key's own quote is bare, one
# inside a JSON string is escaped (`\"turn\":`), so no text of the model's matches.
_NUMBERED = re.compile(rb'"(turn|seq)":([0-9]{1,15})[,}]')


@dataclass(frozen=True, slots=True)
class Spent:
    """What one model answer cost, as its server said: tokens read and written, and when
    (UTC RFC 3339, `bxcore.clock`), which says the day it counts on."""

    input: int
    output: int
    at: str

    @property
    def tokens(self) -> int:
        return self.input + self.output


@dataclass(frozen=True, slots=True)
class ModelReply:
    """An answer of the model; `usage` absent when its server said nothing of its cost (and
    in histories from before issue 16)."""

    TYPE: ClassVar[str] = "model_reply"
    turn: int
    text: str
    calls: tuple[SentCall, ...]
    usage: Spent | None = None


@dataclass(frozen=True, slots=True)
class ToolResultRecord:
    TYPE: ClassVar[str] = "tool_result"
    turn: int
    call: str
    content: str


@dataclass(frozen=True, slots=True)
class Spawned:
    TYPE: ClassVar[str] = "spawned"
    turn: int
    call: str
    child: str


Record = TurnEvent | ModelReply | ToolResultRecord | Spawned
# Each record's class by its `type` (also how `history_scan` knows loopd's own lines).
TYPES: dict[str, type[Any]] = {
    cls.TYPE: cls for cls in (TurnEvent, ModelReply, ToolResultRecord, Spawned)
}


def chars(message: Message) -> int:
    """The characters of `message` the model reads: its text, its calls' names and
    arguments, or a result's content."""
    if isinstance(message, User):
        return len(message.text)
    if isinstance(message, Assistant):
        return len(message.text) + sum(len(c.name) + len(c.arguments) for c in message.tool_calls)
    return len(message.content)


def held(message: Message) -> int:
    """The bytes `message`'s text takes in memory: a character takes 1, 2 or 4 bytes, as the
    widest of its string needs (PEP 393), so it is not `chars`."""
    if isinstance(message, User):
        return sys.getsizeof(message.text)
    if isinstance(message, Assistant):
        calls = message.tool_calls
        return sys.getsizeof(message.text) + sum(sys.getsizeof(c.arguments) for c in calls)
    return sys.getsizeof(message.content)


class RecordTooLarge(ValueError):
    """A record longer than a history line may be (`MAX_LINE`); nothing was written."""


def _too_large(record: Record, size: int, least: str = "") -> str:
    if isinstance(record, ModelReply):
        return (
            f"the model's answer is too large to keep in the session's history ({least}{size} "
            f"bytes as a record, at most {MAX_LINE}), so the turn stops; ask for a shorter "
            "answer, or for one in parts written to files"
        )
    return f"a {record.TYPE} record of {size} bytes is longer than a history line ({MAX_LINE})"


def encode(record: Record) -> bytes:
    return wire.dump_json(schema.to_json_object(record, ("type", record.TYPE))).encode()


def decode(line: bytes) -> Record:
    """One line back to its record; ValueError for anything else."""
    value = wire.parse_json(line)
    kinds = [v for k, v in value if k == "type"] if isinstance(value, schema.Obj) else []
    cls = TYPES.get(kinds[0]) if kinds and isinstance(kinds[0], str) else None
    if cls is None:
        raise ValueError("not a history record")
    record: Record = schema.from_json_object(cls, value, cls.TYPE, tag_key="type")
    return record


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


@dataclass(slots=True)
class _Turn:
    """What one turn's records say, kept up to date as each record is taken, so that a step
    reads it at once instead of going over every record of the session again."""

    messages: list[Message] = field(default_factory=list)  # what the model has had
    size: int = 0  # their characters (`chars`)
    held: int = 0  # the bytes their text takes in memory (`held`)
    calls: dict[str, SentCall] = field(default_factory=dict)  # the calls its replies made, by id
    steps: int = 0  # model replies
    reply: ModelReply | None = None  # the last one
    answered: set[str] = field(default_factory=set)  # calls with a result
    calls_shown: int = 0  # tool_called events since the last reply
    text_shown: bool = False  # an assistant_text event since the last reply
    error: str | None = None  # the last error event's message
    tokens: int | None = None  # what its answers cost (None: no server said)
    failed: bool = False  # the last turn_end's reason is `error`
    stopped: bool = False  # the last turn_end's reason is `cancelled`: the owner stopped it
    end: EndReason | None = None  # the last turn_end's reason


@dataclass
class SessionLog:
    """One session's history file and what loopd knows from it: each turn's summary (`_Turn`)
    of the turns the model may still be sent, and a few figures of the whole, kept as records
    are taken, at load and at each append. Older turns are let go (`_let_go_old`)."""

    session: str
    path: Path
    context: int = CONTEXT_CHARS  # `[loop] context_chars`
    seq: int = 0
    turns: int = 0  # the newest turn an owner message started
    owner_text: dict[int, str] = field(default_factory=dict)  # of the turns kept
    spawns: dict[str, str] = field(default_factory=dict)  # call id -> child session
    updated: str = ""  # when the file was last written
    size: int = 0  # the file's length in bytes
    spent: list[tuple[str, int]] = field(default_factory=list)  # each answer's (at, tokens)
    write: Callable[[int, bytes], int] = field(default=os.write, repr=False)  # os.write; a seam
    _top: int = field(default=0, init=False)  # the highest turn number the history holds
    _owed: list[bytes] = field(default_factory=list, init=False)  # taken, not yet written
    _turns: dict[int, _Turn] = field(default_factory=dict, init=False)  # the turns kept
    _order: list[int] = field(default_factory=list, init=False)  # their numbers, ascending
    _open: set[int] = field(default_factory=set, init=False)  # kept turns said and not ended
    _kept: int = field(default=0, init=False)  # the characters of the turns kept
    _held: int = field(default=0, init=False)  # the bytes of their text in memory
    _gone: int = field(default=0, init=False)  # every turn up to this one was let go, or none

    def __repr__(self) -> str:
        return (
            f"SessionLog({self.session}: {self.turns} turns, {len(self._open)} open, "
            f"{len(self._order)} kept, {self._kept} chars)"
        )

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
        turn = self._turns.get(record.turn)
        if turn is None:
            if record.turn <= self._gone:  # a turn let go: only the figures above count
                return
            turn = self._turns[record.turn] = _Turn()
            bisect.insort(self._order, record.turn)
        self._take_in(turn, record)
        self._let_go_old()

    def _take_in(self, turn: _Turn, record: Record) -> None:
        """What `record` says of its turn, which is kept."""
        added: Message | None = None
        if isinstance(record, TurnEvent):
            event = record.event
            if isinstance(event, OwnerSaid):
                self.owner_text[record.turn] = event.text
                if turn.end is None:
                    self._open.add(record.turn)
                added = User(event.text)
            elif isinstance(event, TurnEnd):
                self._open.discard(record.turn)
                turn.failed = event.reason is EndReason.ERROR
                turn.stopped = event.reason is EndReason.CANCELLED
                turn.end = event.reason
            elif isinstance(event, ToolCalled):
                turn.calls_shown += 1
            elif isinstance(event, AssistantText):
                turn.text_shown = True
            elif isinstance(event, TurnError):
                turn.error = event.message
        elif isinstance(record, ModelReply):
            turn.steps += 1
            turn.reply = record  # what follows is counted from here
            turn.answered, turn.calls_shown, turn.text_shown = set(), 0, False
            turn.calls.update((call.id, call) for call in record.calls)
            if record.usage is not None:
                turn.tokens = (turn.tokens or 0) + record.usage.tokens
            calls = tuple(ToolCall(c.model_id, c.name, c.arguments) for c in record.calls)
            added = Assistant(record.text, calls)
        elif isinstance(record, ToolResultRecord):
            turn.answered.add(record.call)
            call = turn.calls.get(record.call)
            if call is not None:  # loopd writes a result only after its call's reply
                added = ToolResult(call.model_id, call.name, record.content)
        if added is not None:
            turn.messages.append(added)
            size = chars(added)
            turn.size += size
            self._kept += size
            turn.held += held(added)
            self._held += held(added)

    def _let_go_old(self) -> None:
        """Let go of the oldest turns that no request will send again: those before the turn
        that runs (the oldest open one, else the newest) that `transcript` leaves out of its
        request. A later request reaches no further back (a newer turn only takes room), so
        what is let go is never needed again; the file keeps it."""
        if len(self._order) < 2:
            return
        running = min(self._open) if self._open else self._order[-1]
        window = self._kept
        for number in reversed(self._order):  # the turns after it: none or one or two
            if number <= running:
                break
            window -= self._turns[number].size
        while window > self.context and self._order[0] < running:
            number = self._order.pop(0)
            gone = self._turns.pop(number)
            self.owner_text.pop(number, None)
            self._kept -= gone.size
            self._held -= gone.held
            window -= gone.size
            self._gone = max(self._gone, number)

    def append(self, record: Record, *, owe: bool = False) -> None:
        """Write one record durably, then remember it; `RecordTooLarge` (and nothing written)
        when its line could not be read back; `HistoryUnwritable` when it could not be written
        (the file as it was). With `owe`, one that cannot be written is remembered all the
        same, and written before the next that can be (a turn's end the owner was shown)."""
        if isinstance(record, ModelReply):  # at least a byte a character: refused unencoded
            least = len(record.text) + sum(len(c.arguments) for c in record.calls)
            if least > MAX_LINE:
                raise RecordTooLarge(_too_large(record, least, "at least "))
        line = encode(record) + b"\n"
        if len(line) - 1 > MAX_LINE:
            raise RecordTooLarge(_too_large(record, len(line) - 1))
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

    def unfinished(self) -> list[int]:
        """Turns started by the owner and not yet ended, oldest first."""
        return sorted(self._open)

    def ended(self, turn: int) -> bool:
        """True when `turn` has a `turn_end` (a turn let go had ended, or never began)."""
        found = self._turns.get(turn)
        return found.end is not None if found is not None else turn <= self._gone

    @property
    def weight(self) -> int:
        """About how many bytes of memory this log holds: what `Sessions` counts."""
        return self._held + WEIGHT_OF_TURN * len(self._order) + WEIGHT_OF_LOG

    def transcript(self, up_to: int) -> list[Message]:
        """What the model is sent for turn `up_to`: its messages, after those of the newest
        earlier turns whose characters fit in `context` with it, whole turns in their order.
        `up_to` is always sent whole, however long."""
        chosen: list[_Turn] = []
        size = 0
        for number in reversed(self._order):
            if number > up_to:
                continue
            turn = self._turns[number]
            if chosen and size + turn.size > self.context:
                break
            size += turn.size
            chosen.append(turn)
        return [message for turn in reversed(chosen) for message in turn.messages]

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

    def _turn(self, turn: int) -> _Turn:
        return self._turns.get(turn) or _Turn()
