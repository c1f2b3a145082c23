"""The admin socket's messages (SPEC §3.6, §9, §13): the owner's side of brokerd. Approvals
and verdicts, grants, the ledger's records and checks, `explain`, and the notes that brokerd
asks memoryd for on the owner's behalf (§11); and broker-events, what brokerd publishes of
approvals and of the ledger's head. Pure: no I/O.
"""

from __future__ import annotations

import enum
from typing import Annotated, ClassVar

from bxcore.deny import DenyReason
from bxcore.frozen import frozen
from bxcore.labels import Label
from bxcore.wire.common import (
    ApprovalId,
    Asks,
    CallId,
    Count,
    JobId,
    Preview,
    RequestId,
    Session,
    Sha256,
    Short,
    ToolId,
)
from bxcore.wire.schema import Int


class Scope(enum.StrEnum):
    ONCE = "once"
    SESSION = "session"


class ApprovalState(enum.StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    REFUSED = "refused"
    EXPIRED = "expired"


class AskWhy(enum.StrEnum):
    GRANT_ASKS = "the grant asks"
    UNTRUSTED = "the session holds untrusted content"


class Verdict(enum.StrEnum):
    """What `explain` says brokerd would do."""

    ALLOWED = "allowed"
    ASK = "ask"
    DENIED = "denied"


# --- the admin socket (§3.6, §9, §13) --------------------------------------------------------


@frozen
class VerdictRequest(Asks["Settled"]):
    """`verdict`: the owner's answer to a pending approval."""

    TYPE: ClassVar[str] = "verdict"
    id: RequestId
    approval: ApprovalId
    approve: bool
    scope: Scope
    by: Short


@frozen
class Settled:
    """The answer to a verdict: where the approval ended, and the call's denial if any."""

    TYPE: ClassVar[str] = "settled"
    id: RequestId
    approval: ApprovalId
    state: ApprovalState
    reason: DenyReason | None = None


@frozen
class TargetInfo:
    """One target of an untrusted session's call (§20): where it is in the arguments (a JSON
    pointer), its value as JSON text (cut to 200 characters), and where it came from: `owner`,
    `code` (never taken as the owner's), `untrusted: call <id>` or `unknown`; for an untrusted
    one, the tool of that call where the ledger says (absent from older brokerds)."""

    at: Short
    value: Short
    origin: Short
    tool: ToolId | None = None


@frozen
class ApprovalInfo:
    """One pending approval, with every canonical argument the owner approves (§9.1)."""

    approval: ApprovalId
    session: Session
    call: CallId
    tool: ToolId
    arguments: str
    grant: Short
    label: Label
    why: AskWhy
    requested: Short
    expires: Short
    preview: Preview | None = None  # write_file: a unified diff of what would change (§12.2)
    write: bool | None = None  # shell: False when its folder is bound read-only (issue 15)
    job: Short | None = None  # a job's run: which job, and the only grants it sees (§19)
    targets: tuple[TargetInfo, ...] | None = None  # asked because untrusted: each target (§20)


@frozen
class PendingQuery(Asks["PendingList"]):
    TYPE: ClassVar[str] = "pending_query"
    id: RequestId


@frozen
class PendingList:
    TYPE: ClassVar[str] = "pending_list"
    id: RequestId
    approvals: tuple[ApprovalInfo, ...]


@frozen
class GrantInfo:
    """A grant file as brokerd sees it; an invalid one says why in `problem`."""

    id: Short
    sha256: Sha256
    valid: bool
    problem: Short | None = None
    tool: Short | None = None
    mode: Short | None = None
    path: Short | None = None
    host: Short | None = None
    class_: Short | None = None
    untrusted: bool | None = None
    note: Short | None = None
    write: bool | None = None  # shell grants: False binds the folder read-only (issue 15)
    kind: Short | None = None  # MCP grants: source, sink or both (§18.5)
    match: tuple[Short, ...] | None = None  # MCP grants: `[match]` as NAME=VALUE, one a value


@frozen
class GrantsReload(Asks["GrantList"]):
    TYPE: ClassVar[str] = "grants_reload"
    id: RequestId


@frozen
class GrantList:
    TYPE: ClassVar[str] = "grant_list"
    id: RequestId
    grants: tuple[GrantInfo, ...]


@frozen
class GrantAdd(Asks["GrantList"]):
    """Write a new grant file (§5.1), checked as `bxctl grant add` checks it; answered with
    the new `grant_list`, or `error` `invalid` saying why nothing was written."""

    TYPE: ClassVar[str] = "grant_add"
    id: RequestId
    grant: Short
    tool: Short
    mode: Short
    class_: Short
    path: Short | None = None
    host: Short | None = None
    untrusted: bool | None = None
    note: Short | None = None
    write: bool | None = None  # shell only: False binds the folder read-only (issue 15)
    kind: Short | None = None  # MCP tools only (§18.5)
    match: tuple[Short, ...] | None = None  # MCP tools only: NAME=VALUE, as `--match`


@frozen
class GrantRemove(Asks["GrantList"]):
    """Remove one grant file; answered with the new `grant_list`."""

    TYPE: ClassVar[str] = "grant_remove"
    id: RequestId
    grant: Short


@frozen
class AuditTail(Asks["AuditRecords"]):
    TYPE: ClassVar[str] = "audit_tail"
    id: RequestId
    n: Annotated[int, Int(1, 100_000)]
    session: Session | None = None


@frozen
class JobHistoryQuery(Asks["AuditRecords"]):
    """A job's `job_started` and `job_ended` records, oldest first (`bxctl job history`)."""

    TYPE: ClassVar[str] = "job_history_query"
    id: RequestId
    job: JobId
    n: Annotated[int, Int(1, 10_000)] = 100


@frozen
class AuditRecords:
    """Ledger records, each exactly its line in the ledger."""

    TYPE: ClassVar[str] = "audit_records"
    id: RequestId
    records: tuple[str, ...]


@frozen
class AuditVerify(Asks["AuditReport"]):
    TYPE: ClassVar[str] = "audit_verify"
    id: RequestId


@frozen
class AuditAccept(Asks["AuditReport"]):
    """The owner takes a cut or rolled-back ledger as it is (issue 10), answered `audit_report`
    with what was lost as its problem."""

    TYPE: ClassVar[str] = "audit_accept"
    id: RequestId


@frozen
class AuditReport:
    TYPE: ClassVar[str] = "audit_report"
    id: RequestId
    ok: bool
    records: Count
    head_seq: Count
    head_hash: Sha256
    problem: Short | None = None


class LedgerHealth(enum.StrEnum):
    """The ledger's state as brokerd holds it (SPEC §7; `services.brokerd.ledger.file`'s
    `LedgerState`)."""

    OK = "ok"
    LOADING = "loading"
    FAILED = "failed"
    BROKEN = "broken"
    CLOSED = "closed"


@frozen
class LedgerQuery(Asks["LedgerStatus"]):
    """The ledger's state now (issue 28), for `bxctl status` and `bxctl up`: answered at once,
    also while brokerd is still reading the ledger (`loading`)."""

    TYPE: ClassVar[str] = "ledger_query"
    id: RequestId


@frozen
class LedgerStatus:
    """`problem`: why it is not ok, in one line; `free`: the bytes left on the disk holding
    the ledger (None when brokerd cannot tell)."""

    TYPE: ClassVar[str] = "ledger_status"
    id: RequestId
    state: LedgerHealth
    seq: Count
    problem: Short | None = None
    free: Count | None = None


@frozen
class Explain(Asks["Explanation"]):
    TYPE: ClassVar[str] = "explain"
    id: RequestId
    session: Session
    tool: ToolId
    arguments: str


@frozen
class Explanation:
    """What brokerd would decide now, and each step of why (§13 `bxctl explain`)."""

    TYPE: ClassVar[str] = "explanation"
    id: RequestId
    verdict: Verdict
    label: Label
    steps: tuple[Short, ...]
    reason: DenyReason | None = None
    winner: Short | None = None


# --- the owner's view of memory (§11, §12.2): brokerd asks memoryd for the owner ---------


@frozen
class NotesQuery(Asks["Notes"]):
    """The notes, newest first; with `query`, those that hold any of its words."""

    TYPE: ClassVar[str] = "notes_query"
    id: RequestId
    query: Short | None = None


@frozen
class NoteInfo:
    note: Count
    session: Session
    label: Label
    bytes: Count
    created: Short
    text: Short  # the note, cut to what a short string holds


@frozen
class Notes:
    TYPE: ClassVar[str] = "notes"
    id: RequestId
    notes: tuple[NoteInfo, ...]
    total: Count


# --- broker-events (PUB) ---------------------------------------------------------------------


@frozen
class ApprovalRequested:
    TYPE: ClassVar[str] = "approval_requested"
    approval: ApprovalInfo


@frozen
class ApprovalSettled:
    TYPE: ClassVar[str] = "approval_settled"
    approval: ApprovalId
    session: Session
    state: ApprovalState
    reason: DenyReason | None = None


@frozen
class LedgerHead:
    """The ledger's head after a group commit: the witness the owner's side keeps (§7).
    `size`: the ledger's length in bytes through that record's line, so the owner's side can
    find the record again and check a later head extends it (issue 10)."""

    TYPE: ClassVar[str] = "ledger_head"
    seq: Count
    hash: Sha256
    size: Count | None = None
