"""What a session's history keeps in memory (issue 28), bounded by `[loop] context_chars`: only
the turns the model is still sent (`transcript`: the newest whole turns that fit, the turn that
runs always whole), each as a summary of its records (`TurnSummary`) kept up to date as each
record is taken, so that a step reads it at once instead of going over every record again.
Older turns are let go (`KeptTurns.take`); the file keeps them (`history`). `weight` is about
the bytes this holds, what the loaded-histories cache counts (`sessions`).
"""

from __future__ import annotations

import bisect
import sys
from dataclasses import dataclass, field

from bxcore.config.file import LoopConfig
from bxcore.wire.messages import (
    AssistantText,
    EndReason,
    OwnerSaid,
    ToolCalled,
    TurnEnd,
    TurnError,
    TurnEvent,
)
from services.loopd.core.turn_events import SentCall
from services.loopd.history_records import ModelReply, Record, ToolResultRecord
from services.loopd.model import Assistant, Message, ToolCall, ToolResult, User

CONTEXT_CHARS = LoopConfig().context_chars
# Bytes a log holds beside its messages' text, for `KeptTurns.weight` (measured with tracemalloc
# on logs of 1 to 240 short turns: 0.85 to 1.5 KB a turn, ~2 KB a log).
WEIGHT_OF_TURN = 1_536
WEIGHT_OF_LOG = 3_072


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


@dataclass(slots=True)
class TurnSummary:
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
class KeptTurns:
    """The turns of one history the model may still be sent, each turn's summary, and the
    owner's words of each; older turns are let go as records are taken."""

    context: int = CONTEXT_CHARS  # `[loop] context_chars`
    owner_text: dict[int, str] = field(default_factory=dict, init=False)  # of the turns kept
    _turns: dict[int, TurnSummary] = field(default_factory=dict, init=False)  # the turns kept
    _order: list[int] = field(default_factory=list, init=False)  # their numbers, ascending
    _open: set[int] = field(default_factory=set, init=False)  # kept turns said and not ended
    _size: int = field(default=0, init=False)  # the characters of the turns kept
    _held: int = field(default=0, init=False)  # the bytes of their text in memory
    _gone: int = field(default=0, init=False)  # every turn up to this one was let go, or none

    def __repr__(self) -> str:
        return f"{len(self._open)} open, {len(self._order)} kept, {self._size} chars"

    def take(self, record: Record) -> None:
        """What `record` says of its turn, unless that turn was let go; then let go of what
        no request will send again."""
        turn = self._turns.get(record.turn)
        if turn is None:
            if record.turn <= self._gone:  # a turn let go: only the log's figures count
                return
            turn = self._turns[record.turn] = TurnSummary()
            bisect.insort(self._order, record.turn)
        self._take_in(turn, record)
        self._let_go_old()

    def _take_in(self, turn: TurnSummary, record: Record) -> None:
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
            self._size += size
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
        window = self._size
        for number in reversed(self._order):  # the turns after it: none or one or two
            if number <= running:
                break
            window -= self._turns[number].size
        while window > self.context and self._order[0] < running:
            number = self._order.pop(0)
            gone = self._turns.pop(number)
            self.owner_text.pop(number, None)
            self._size -= gone.size
            self._held -= gone.held
            window -= gone.size
            self._gone = max(self._gone, number)

    def unfinished(self) -> list[int]:
        """Turns started by the owner and not yet ended, oldest first."""
        return sorted(self._open)

    def ended(self, turn: int) -> bool:
        """True when `turn` has a `turn_end` (a turn let go had ended, or never began)."""
        found = self._turns.get(turn)
        return found.end is not None if found is not None else turn <= self._gone

    @property
    def weight(self) -> int:
        """About how many bytes of memory a log holds with these turns."""
        return self._held + WEIGHT_OF_TURN * len(self._order) + WEIGHT_OF_LOG

    def transcript(self, up_to: int) -> list[Message]:
        """What the model is sent for turn `up_to`: its messages, after those of the newest
        earlier turns whose characters fit in `context` with it, whole turns in their order.
        `up_to` is always sent whole, however long."""
        chosen: list[TurnSummary] = []
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

    def turn(self, turn: int) -> TurnSummary:
        """`turn`'s summary; an empty one for a turn not kept."""
        return self._turns.get(turn) or TurnSummary()
