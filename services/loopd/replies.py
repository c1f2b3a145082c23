"""What every provider does with a model's answer before it is a `Reply` (SPEC §10.2): text
made fit for UTF-8, tool-call ids made sendable and new in the conversation, and a stream's
events fed to the provider's `Streamed` reader. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

from bxcore.ids import MAX_CALL_ID, byte_length_between
from services.loopd.model import Assistant, Message, Reply, ToolCall, ToolResult

if TYPE_CHECKING:
    pass

_SURROGATE = re.compile("[\ud800-\udfff]")


class Streamed(Protocol):
    """A provider's reader of one streamed answer, fed each event's data in turn."""

    def take(self, data: str) -> bool:
        """Read one event's data; True at the answer's end marker."""
        ...

    def reply(self, messages: Sequence[Message]) -> Reply:
        """The answer read so far; ModelError when it is not whole."""
        ...


def clean(text: str) -> str:
    """`text` with each lone surrogate (which JSON may carry, UTF-8 may not) as U+FFFD."""
    return _SURROGATE.sub("\ufffd", text)


def tool_calls(
    calls: Iterable[tuple[object, str, str]], messages: Sequence[Message]
) -> tuple[ToolCall, ...]:
    """Calls of (the model's id or None, name, arguments) with ids that can be sent and are
    new in the conversation: brokerd answers a (session, call id) once (I8), so a reused id
    would get an earlier call's answer. A missing, bad or reused id becomes `call_<n>`, the
    smallest n not yet taken."""
    taken = _ids_in(messages)
    given: list[tuple[str | None, str, str]] = []
    for raw_id, name, arguments in calls:
        good = isinstance(raw_id, str) and byte_length_between(clean(raw_id), 1, MAX_CALL_ID)
        id_ = clean(raw_id) if good and isinstance(raw_id, str) else None
        if id_ is not None and id_ in taken:
            id_ = None
        if id_ is not None:
            taken.add(id_)
        given.append((id_, clean(name), clean(arguments)))
    made: list[ToolCall] = []
    n = 0
    for id_, name, arguments in given:
        if id_ is None:
            n += 1
            while f"call_{n}" in taken:
                n += 1
            id_ = f"call_{n}"
            taken.add(id_)
        made.append(ToolCall(id_, name, arguments))
    return tuple(made)


def _ids_in(messages: Iterable[Message]) -> set[str]:
    """Every tool-call id the conversation already uses."""
    taken: set[str] = set()
    for message in messages:
        if isinstance(message, Assistant):
            taken.update(call.id for call in message.tool_calls)
        elif isinstance(message, ToolResult):
            taken.add(message.call_id)
    return taken
