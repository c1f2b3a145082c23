"""A history's lines (SPEC §10.1, §10.6): loopd's own transcript records (`model_reply`,
`tool_result`, `spawned`) beside the `turn_event`s the owner sees, each one line of canonical
JSON tagged with its `type`, and what each model answer cost (`Spent`, issue 16). A line is
never longer than one that can be read back (`MAX_LINE`, the wire's limit): a record that would
be is refused before anything is written (`line_of`). The file they are written to, and what
is read back from it, is `history`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from bxcore.wire import codec as wire
from bxcore.wire import schema
from bxcore.wire.messages import TurnEvent
from services.loopd.core.turn_events import SentCall

MAX_LINE = wire.MAX_MESSAGE  # `decode` reads no longer line


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


def line_of(record: Record) -> bytes:
    """`record`'s line, with its newline; `RecordTooLarge` when it could not be read back."""
    if isinstance(record, ModelReply):  # at least a byte a character: refused unencoded
        least = len(record.text) + sum(len(c.arguments) for c in record.calls)
        if least > MAX_LINE:
            raise RecordTooLarge(_too_large(record, least, "at least "))
    line = encode(record) + b"\n"
    if len(line) - 1 > MAX_LINE:
        raise RecordTooLarge(_too_large(record, len(line) - 1))
    return line


def decode(line: bytes) -> Record:
    """One line back to its record; ValueError for anything else."""
    value = wire.parse_json(line)
    kinds = [v for k, v in value if k == "type"] if isinstance(value, schema.Obj) else []
    cls = TYPES.get(kinds[0]) if kinds and isinstance(kinds[0], str) else None
    if cls is None:
        raise ValueError("not a history record")
    record: Record = schema.from_json_object(cls, value, cls.TYPE, tag_key="type")
    return record
