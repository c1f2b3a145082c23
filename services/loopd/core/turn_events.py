"""What a turn machine (`core.turn`) is fed and what it asks for, as values: the events (what the
shell saw: what the history holds of the turn, the model's answer or its failure, what the
turn has spent, brokerd's answer to a call or its hold for the owner, a sub-agent's answer,
brokerd gone, the owner's stop, a history that cannot be written) and the effects (what the
shell must do, in order: show the owner, record, ask the model, weigh the budgets, ask brokerd,
wait for an approval, run a sub-agent). Also `SentCall`, a tool call as loopd sent it, which the
history keeps. Pure.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import ClassVar

from bxcore.frozen import frozen
from bxcore.wire.messages import Denied, Done, EndReason, Failed

FinalOutcome = Done | Denied | Failed  # every outcome but `pending`, which is not a result yet


@dataclass(frozen=True, slots=True)
class SentCall:
    """A tool call as loopd sent it: our call id (unique in the session, what brokerd sees),
    the model's own id, the tool and the arguments exactly as the model wrote them."""

    id: str
    model_id: str
    name: str
    arguments: str


# --- events: what the shell saw -------------------------------------------------------------


class Kind(enum.StrEnum):
    BEGAN = "began"
    REPLIED = "replied"
    NOT_REPLIED = "not_replied"
    COUNTED = "counted"
    ANSWERED = "answered"
    HELD = "held"
    SUB_ANSWERED = "sub_answered"
    NO_BROKER = "no_broker"
    STOPPED = "stopped"
    HALTED = "halted"


@frozen
class Began:
    """What the history holds of the turn, read as it begins or resumes after a crash: the
    last reply's text and whether the owner saw it, when that reply called no tool (`final`:
    only the end is missing); the model's answers so far (`steps`); the last reply's calls
    without a result, each with whether the owner saw it called (`open`), and every call of
    that reply's, in order (`reply`); its text (`last_text`); and why no turn may start now
    (`refused`: the day's cap is reached, else None)."""

    KIND: ClassVar[Kind] = Kind.BEGAN
    final: tuple[str, bool] | None = None
    steps: int = 0
    open: tuple[tuple[SentCall, bool], ...] = ()
    reply: tuple[str, ...] = ()
    last_text: str = ""
    refused: str | None = None


@frozen
class Replied:
    """The model answered and its answer is in the history (`calls` named by `call_id`)."""

    KIND: ClassVar[Kind] = Kind.REPLIED
    text: str
    calls: tuple[SentCall, ...] = ()


@frozen
class NotReplied:
    """The model failed, or its answer is too large for a history line (nothing recorded)."""

    KIND: ClassVar[Kind] = Kind.NOT_REPLIED
    why: str


@frozen
class Counted:
    """What the budgets say after an answer with calls: why the turn stops (the turn's own
    budget spent, or the day's cap reached), or None."""

    KIND: ClassVar[Kind] = Kind.COUNTED
    over: str | None = None


@frozen
class Answered:
    """brokerd's final answer to the call (or loopd's own, for a tool no one has)."""

    KIND: ClassVar[Kind] = Kind.ANSWERED
    outcome: FinalOutcome


@frozen
class Held:
    """brokerd holds the call for the owner's approval (again, after a long poll)."""

    KIND: ClassVar[Kind] = Kind.HELD
    approval: str


@frozen
class SubAnswered:
    """A sub-agent's answer, as the parent's model reads it (`content`), and whether it did
    its work (`ok`)."""

    KIND: ClassVar[Kind] = Kind.SUB_ANSWERED
    content: str
    ok: bool


@frozen
class NoBroker:
    """brokerd did not answer at all: the turn cannot go on."""

    KIND: ClassVar[Kind] = Kind.NO_BROKER
    why: str


@frozen
class Stopped:
    """The owner stopped the turn (§12.2); `open`: the calls the history holds without a
    result."""

    KIND: ClassVar[Kind] = Kind.STOPPED
    open: tuple[str, ...] = ()


@frozen
class Halted:
    """The history cannot be written (issue 28), or the turn failed for a reason no one
    foresaw: `said`, the owner's line; `open` as for `Stopped`."""

    KIND: ClassVar[Kind] = Kind.HALTED
    said: str
    open: tuple[str, ...] = ()


Event = (
    Began | Replied | NotReplied | Counted | Answered | Held | SubAnswered | NoBroker | Stopped
    | Halted
)  # fmt: skip


# --- effects: what the shell must do, in order ------------------------------------------------


class Why(enum.StrEnum):
    """Why a call is closed without a result of its own (the sentence is the shell's)."""

    TOO_MANY = "too_many"  # past `max_calls_per_reply`: `too_many_calls`
    BUDGET = "budget"  # its answer spent the budget: `BUDGET_RESULT`
    CANCELLED = "cancelled"  # the owner stopped the turn: `CANCELLED_RESULT`
    HALTED = "halted"  # the turn stopped with an error: `room.call_stopped`


@frozen
class Say:
    """Show the owner the model's words (`assistant_text`, cut as the model's reads are)."""

    text: str


@frozen
class Warn:
    """Show the owner an `error` event (`owe`: remembered if it cannot be written, as
    `SessionLog.append`)."""

    message: str
    owe: bool = False


@frozen
class TooMany:
    """Show the owner that a reply asked for more calls than `cap` (`too_many_calls_said`)."""

    asked: int
    cap: int


@frozen
class End:
    """Show the owner the turn's end, with what it spent."""

    reason: EndReason
    owe: bool = False


@frozen
class Close:
    """Record a call's result without running it: why (`said`: the error, for `HALTED`)."""

    call: str
    why: Why
    said: str = ""
    owe: bool = False


@frozen
class Called:
    """Show the owner a call is made (`tool_called`): `tool`, its name or `?`."""

    tool: str
    arguments: str


@frozen
class OwnerWords:
    """Give brokerd the owner's words of the session's turns, before a call (§20)."""


@frozen
class Ask:
    """Send the call to brokerd; feed back `Answered`, `Held` or `NoBroker`."""

    call: SentCall


@frozen
class Waits:
    """Show the owner the call waits for an approval (`tool_pending`)."""

    tool: str
    approval: str


@frozen
class Await:
    """Long-poll brokerd for the approval's call; feed back `Answered`, `Held` or
    `NoBroker`."""

    approval: str


@frozen
class Spawn:
    """Run the call's sub-agent; feed back `SubAnswered` or `NoBroker`."""

    call: SentCall


@frozen
class Tell:
    """Show the owner how the call ended (`tool_done`, `tool_denied` or `error`)."""

    tool: str
    outcome: FinalOutcome | SubAnswered


@frozen
class Keep:
    """Record the call's result: what the model reads of `outcome`."""

    call: str
    outcome: FinalOutcome | SubAnswered


@frozen
class AskModel:
    """Ask the model for step `step`'s answer and record it; feed back `Replied` or
    `NotReplied`."""

    step: int


@frozen
class Count:
    """Weigh the budgets after an answer with calls (the turn's spending, its sub-agents'
    too, only under a budget of its own); feed back `Counted`."""

    max_tokens: int | None


Effect = (
    Say | Warn | TooMany | End | Close | Called | OwnerWords | Ask | Waits | Await | Spawn | Tell
    | Keep | AskModel | Count
)  # fmt: skip
