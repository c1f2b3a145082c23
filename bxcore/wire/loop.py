"""The loop socket's messages and loop-events (SPEC §10): an owner's message and the turn it
runs as, a cancel, a job run started by the owner, the sessions, their histories of turn
events and the box's tokens today; and the gateway socket's (§12), which `bxctl chat` asks for
a session's new events and the approvals pending for it. Pure: no I/O.
"""

from __future__ import annotations

import enum
from typing import Annotated, ClassVar

from bxcore.deny import DenyReason
from bxcore.frozen import frozen
from bxcore.wire.admin import ApprovalInfo
from bxcore.wire.common import (
    MAX_WAIT_MS,
    ApprovalId,
    Asks,
    Count,
    JobId,
    OutputShown,
    RequestId,
    Session,
    Short,
    ToolId,
)
from bxcore.wire.schema import Int, Tagged


class EndReason(enum.StrEnum):
    DONE = "done"
    MAX_STEPS = "max_steps"
    ERROR = "error"
    CANCELLED = "cancelled"  # the owner stopped the turn (`cancel`, §12.2)
    BUDGET = "budget"  # its token budget, or the box's for the day, is spent (§19)


# --- the loop socket and loop-events (§10) ---------------------------------------------------


@frozen
class OwnerMessage(Asks["Accepted"]):
    TYPE: ClassVar[str] = "owner_message"
    id: RequestId
    session: Session
    text: str


@frozen
class Accepted:
    """loopd took an owner message; it runs as turn `turn` of the session, and the message
    is the session's event `seq` (what follows it is this turn's, or a later one's)."""

    TYPE: ClassVar[str] = "accepted"
    id: RequestId
    session: Session
    turn: Count
    seq: Count


@frozen
class Cancel(Asks["Cancelled"]):
    """Stop the session's running turn, and its sub-agents' (§12.2): it ends `cancelled`."""

    TYPE: ClassVar[str] = "cancel"
    id: RequestId
    session: Session


@frozen
class Cancelled:
    """The answer to `cancel`, once the turn has ended: the turn that was running, or none
    (`turn` absent) when nothing ran."""

    TYPE: ClassVar[str] = "cancelled"
    id: RequestId
    session: Session
    turn: Count | None = None


@frozen
class JobRun(Asks["JobRunStarted"]):
    """Start a run of the job now (`bxctl job run`, §19), whatever its schedule."""

    TYPE: ClassVar[str] = "job_run"
    id: RequestId
    job: JobId


@frozen
class JobRunStarted:
    """The run `job_run` started: its session, `job-<id>-<n>`."""

    TYPE: ClassVar[str] = "job_run_started"
    id: RequestId
    job: JobId
    session: Session


@frozen
class SessionsQuery(Asks["SessionList"]):
    TYPE: ClassVar[str] = "sessions_query"
    id: RequestId


@frozen
class SessionInfo:
    """`tokens`: what the session's model answers cost in all, as their servers said (absent
    when none said; issue 16)."""

    session: Session
    turns: Count
    busy: bool
    updated: Short
    tokens: Count | None = None


@frozen
class SessionList:
    TYPE: ClassVar[str] = "session_list"
    id: RequestId
    sessions: tuple[SessionInfo, ...]


@frozen
class HistoryQuery(Asks["History"]):
    """A session's events with `seq` greater than `after` (all of them without it)."""

    TYPE: ClassVar[str] = "history_query"
    id: RequestId
    session: Session
    after: Count | None = None


@frozen
class OwnerSaid:
    TAG: ClassVar[str] = "owner_message"
    text: str


@frozen
class AssistantText:
    TAG: ClassVar[str] = "assistant_text"
    text: str


@frozen
class ToolCalled:
    TAG: ClassVar[str] = "tool_called"
    tool: ToolId
    arguments: str


@frozen
class ToolDone:
    """A call that ran: `bytes` of output in all, and `output` itself for the owner's views,
    cut to 16 KiB with a note of what was cut (absent in histories from before issue 12)."""

    TAG: ClassVar[str] = "tool_done"
    tool: ToolId
    ok: bool
    bytes: Count
    output: OutputShown | None = None


@frozen
class ToolDenied:
    """A denial as the owner sees it: the reason only, never the detail (§3.5)."""

    TAG: ClassVar[str] = "tool_denied"
    tool: ToolId
    reason: DenyReason


@frozen
class ToolPending:
    TAG: ClassVar[str] = "tool_pending"
    tool: ToolId
    approval: ApprovalId


@frozen
class TurnEnd:
    """`tokens`: what the turn's model answers cost, as their servers said (absent when none
    said, and in histories from before issue 16)."""

    TAG: ClassVar[str] = "turn_end"
    reason: EndReason
    tokens: Count | None = None


@frozen
class TurnError:
    TAG: ClassVar[str] = "error"
    message: Short


Event = (
    OwnerSaid
    | AssistantText
    | ToolCalled
    | ToolDone
    | ToolDenied
    | ToolPending
    | TurnEnd
    | TurnError
)


@frozen
class TurnEvent:
    TYPE: ClassVar[str] = "turn_event"
    session: Session
    turn: Count
    seq: Count
    event: Annotated[Event, Tagged("kind")]


@frozen
class History:
    """Events in order; `more` when one message could not hold them all (ask again after
    the last `seq`)."""

    TYPE: ClassVar[str] = "history"
    id: RequestId
    session: Session
    events: tuple[TurnEvent, ...]
    more: bool = False


@frozen
class TokensQuery(Asks["Tokens"]):
    """The box's tokens today (§19)."""

    TYPE: ClassVar[str] = "tokens_query"
    id: RequestId


@frozen
class Tokens:
    """The tokens the box's model answers cost on `day` (the machine's local day, `2026-12-01`)
    so far, and `[loop] max_tokens_per_day` (0: no cap)."""

    TYPE: ClassVar[str] = "tokens"
    id: RequestId
    day: Short
    tokens: Count
    max_per_day: Count


# --- the gateway socket (§12): what `bxctl chat` needs -----------------------------------


@frozen
class EventsQuery(Asks["Events"]):
    """A session's events after `after`, waiting up to `wait_ms` for the first new one."""

    TYPE: ClassVar[str] = "events_query"
    id: RequestId
    session: Session
    after: Count
    wait_ms: Annotated[int, Int(0, MAX_WAIT_MS)]


@frozen
class Events:
    """New events of a session, and the approvals pending for it now."""

    TYPE: ClassVar[str] = "events"
    id: RequestId
    session: Session
    events: tuple[TurnEvent, ...]
    pending: tuple[ApprovalInfo, ...]
    more: bool = False
