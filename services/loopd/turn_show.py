"""What a turn's step shows the owner and writes to its history at once (SPEC §10.4, §10.5):
the effects of the turn's machine (`core.turn_events`) that ask no one — the model's words, a
warning, a call's start, its wait on the owner and its outcome, its result kept or closed
without one of its own (too many calls, a budget spent, the owner's stop, a call cut off), the
turn's end — each an event published or a record appended, in the order the machine gave
them. The owner's view of a text is cut as the model's reads are. The effects that ask the
model, brokerd or a sub-agent are `Turns`' (`services.loopd.turn`).
"""

from __future__ import annotations

from collections.abc import Callable

from bxcore.wire.messages import (
    AssistantText,
    Denied,
    Done,
    Event,
    ToolCalled,
    ToolDenied,
    ToolDone,
    ToolPending,
    TurnEnd,
    TurnError,
    TurnEvent,
    short,
)
from services.loopd import room
from services.loopd.core.turn_events import (
    Called,
    Close,
    Effect,
    End,
    FinalOutcome,
    Keep,
    Say,
    SubAnswered,
    Tell,
    TooMany,
    Waits,
    Warn,
    Why,
)
from services.loopd.history import SessionLog
from services.loopd.history_records import ToolResultRecord
from services.loopd.tools import (
    CANCELLED_RESULT,
    cap_result,
    result_of,
    shown_output,
    too_many_calls,
    too_many_calls_said,
)
from services.loopd.usage import BUDGET_RESULT


def show(
    session: SessionLog,
    turn: int,
    effect: Effect,
    publish: Callable[[TurnEvent], None],
    max_calls: int,
) -> None:
    """Carry out an effect that only shows the owner or records: at once, in order.
    `max_calls` is `[loop] max_calls_per_reply`, which a call closed as one too many names."""

    def emit(event: Event, *, owe: bool = False) -> None:
        publish(session.event(turn, event, owe=owe))

    if isinstance(effect, Say):  # the owner's view is cut as the model's reads are
        emit(AssistantText(cap_result(effect.text)))
    elif isinstance(effect, Warn):
        emit(TurnError(short(effect.message)), owe=effect.owe)
    elif isinstance(effect, TooMany):  # each refused call's result says it too
        emit(TurnError(too_many_calls_said(effect.asked, effect.cap)))
    elif isinstance(effect, End):
        emit(TurnEnd(effect.reason, session.turn_tokens(turn)), owe=effect.owe)
    elif isinstance(effect, Close):
        content = _closed(effect, max_calls)
        session.append(ToolResultRecord(turn, effect.call, content), owe=effect.owe)
    elif isinstance(effect, Called):
        emit(ToolCalled(effect.tool, cap_result(effect.arguments)))
    elif isinstance(effect, Waits):
        emit(ToolPending(effect.tool, effect.approval))
    elif isinstance(effect, Tell):
        emit(_told(effect.tool, effect.outcome))
    elif isinstance(effect, Keep):
        outcome = effect.outcome
        if isinstance(outcome, SubAnswered):
            content = outcome.content
        else:
            content = result_of(outcome).content
        session.append(ToolResultRecord(turn, effect.call, content))
    else:
        raise AssertionError(f"{effect!r} is not carried out at once")


def _closed(effect: Close, max_calls: int) -> str:
    """What the model reads of a call closed without its own result."""
    if effect.why is Why.TOO_MANY:
        return too_many_calls(max_calls).content
    if effect.why is Why.BUDGET:
        return BUDGET_RESULT
    if effect.why is Why.CANCELLED:
        return CANCELLED_RESULT
    return room.call_stopped(effect.said)


def _told(tool: str, outcome: FinalOutcome | SubAnswered) -> Event:
    """What the owner is shown of a call's outcome."""
    if isinstance(outcome, SubAnswered):
        size = len(outcome.content.encode())
        return ToolDone(tool, outcome.ok, size, shown_output(outcome.content))
    if isinstance(outcome, Done):
        size = len(outcome.output.encode("utf-8", "replace"))
        return ToolDone(tool, outcome.ok, size, shown_output(outcome.output))
    if isinstance(outcome, Denied):  # the reason only, never the detail (§3.5)
        return ToolDenied(tool, outcome.reason)
    return TurnError(short(f"{tool}: {outcome.message}"))
