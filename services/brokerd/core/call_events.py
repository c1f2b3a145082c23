"""What a call machine (`core.call`) is fed and what it asks for, as values: the events (what
the shell saw: the ledger's records of the call, the decision, a record made durable or not,
how the runner ended, the label raised, the owner's verdict, the expiry) and the effects (what
the shell must do, in order: record, run, raise, answer, and tell the owner's side). Pure.
"""

from __future__ import annotations

import enum
from typing import ClassVar

from bxcore.deny import DenyReason
from bxcore.frozen import frozen
from bxcore.labels import Label
from bxcore.mcp_tools import NO_TOOLS, Catalog
from bxcore.wire.messages import ApprovalState, Outcome, Scope
from services.brokerd.core import policy
from services.brokerd.core.approvals import Move
from services.brokerd.core.records import CallRecords, Entry

# --- events: what the shell saw -------------------------------------------------------------


class Kind(enum.StrEnum):
    FOUND = "found"
    UNAVAILABLE = "unavailable"
    DECIDED = "decided"
    UNLABELLED = "unlabelled"
    DURABLE = "durable"
    NOT_DURABLE = "not_durable"
    RAN = "ran"
    RAISED = "raised"
    NOT_RAISED = "not_raised"
    VERDICT = "verdict"
    EXPIRED = "expired"


@frozen
class Found:
    """The ledger's records of the call (None: never decided)."""

    KIND: ClassVar[Kind] = Kind.FOUND
    records: CallRecords | None
    mcp: Catalog = NO_TOOLS  # the MCP tools now: an invalid MCP call's detail is found again


@frozen
class Unavailable:
    """The ledger cannot say whether the call was decided, or cannot be written."""

    KIND: ClassVar[Kind] = Kind.UNAVAILABLE


@frozen
class Decided:
    """`policy.decide` on the session's `label`; for an `Ask`, the approval id it is recorded
    under, and, when a session-scoped approval covers it (§9.2), what it runs as then
    (`policy.approved`)."""

    KIND: ClassVar[Kind] = Kind.DECIDED
    label: Label
    decision: policy.Decision
    approval: str | None = None
    covered: policy.Allowed | None = None


@frozen
class Unlabelled:
    """The session's label cannot be read: the call cannot be judged."""

    KIND: ClassVar[Kind] = Kind.UNLABELLED
    why: str


@frozen
class Durable:
    KIND: ClassVar[Kind] = Kind.DURABLE


@frozen
class NotDurable:
    KIND: ClassVar[Kind] = Kind.NOT_DURABLE


@frozen
class Ran:
    """How the runner ended. `started`: a sandbox started, so the tool may have read what
    the grant shows, whatever the outcome (issue 9). `error`: brokerd's sentence."""

    KIND: ClassVar[Kind] = Kind.RAN
    ok: bool
    output: str
    exit: int | None
    ms: int
    started: bool
    label: Label | None = None
    error: str | None = None


@frozen
class Raised:
    KIND: ClassVar[Kind] = Kind.RAISED
    before: Label
    after: Label


@frozen
class NotRaised:
    KIND: ClassVar[Kind] = Kind.NOT_RAISED
    why: str


@frozen
class Verdict:
    """The owner's answer; `decision`: `policy.redecide` now, for an approval (None for a
    refusal)."""

    KIND: ClassVar[Kind] = Kind.VERDICT
    approve: bool
    by: str
    scope: Scope
    decision: policy.Decision | None = None


@frozen
class Expired:
    KIND: ClassVar[Kind] = Kind.EXPIRED


Event = (
    Found | Unavailable | Decided | Unlabelled | Durable | NotDurable | Ran | Raised | NotRaised
    | Verdict | Expired
)  # fmt: skip


# --- effects: what the shell must do, in order ------------------------------------------------


@frozen
class Record:
    """Append these records; feed back `Durable` once they are, or `NotDurable`."""

    entries: tuple[Entry, ...]


@frozen
class Run:
    """Run the call as allowed; feed back `Ran`."""

    allowed: policy.Allowed


@frozen
class Raise:
    """Raise the session by `label`; feed back `Raised` or `NotRaised`."""

    label: Label


@frozen
class Answer:
    """The call's answer: final, or `Pending` while the owner decides."""

    outcome: Outcome


@frozen
class Ask:
    """Hold the approval and tell the owner's side (`approval_requested`)."""

    approval: str
    ask: policy.Ask
    label: Label


@frozen
class Settle:
    """The approval moved (`move`), durably: tell the owner's side, and remember a
    session-wide approval (`scope`)."""

    approval: str
    move: Move
    state: ApprovalState
    reason: DenyReason | None
    scope: Scope


@frozen
class Refuse:
    """The verdict changes nothing: the approval is being settled or is settled, or the
    verdict could not be made durable (it stays pending)."""

    why: str
    unavailable: bool = False


Effect = Record | Run | Raise | Answer | Ask | Settle | Refuse
