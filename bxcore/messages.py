"""Every message that crosses a boxmaker socket (SPEC §3), as frozen dataclasses.

Each top-level message has `TYPE`, its `"type"` on the wire; a variant of a union has `TAG`.
Fields are declared in wire order. The annotations are the whole contract: `bxcore.schema`
reads them to decode strictly and encode canonically. Pure: no I/O. The whole vocabulary
stays in one module, grouped by socket, so that `bxcore.wire` knows every type from one place.
"""

from __future__ import annotations

import enum
import re
from typing import Annotated, ClassVar

from bxcore.deny import DenyReason
from bxcore.frozen import frozen
from bxcore.ids import MAX_CALL_ID, MAX_REQUEST_ID, MAX_TOOL_NAME, valid_grant_id, valid_session
from bxcore.labels import Label
from bxcore.schema import Flat, Int, Tagged, Text

_APPROVAL = re.compile(r"[a-z2-9]{8}")
_HASH = re.compile(r"[0-9a-f]{64}")

RequestId = Annotated[str, Text(1, MAX_REQUEST_ID, what="a request id")]
Session = Annotated[
    str,
    Text(1, 128, valid_session, "a session id (A-Z a-z 0-9 . _ -, not starting with . or -)"),
]
CallId = Annotated[str, Text(1, MAX_CALL_ID, what="a call id")]
ToolId = Annotated[str, Text(1, MAX_TOOL_NAME, what="a tool name")]
ApprovalId = Annotated[
    str, Text(8, 8, lambda s: _APPROVAL.fullmatch(s) is not None, "an approval id")
]
Sha256 = Annotated[str, Text(64, 64, lambda s: _HASH.fullmatch(s) is not None, "a hex SHA-256")]
MAX_SHORT = 4096
Short = Annotated[str, Text(0, MAX_SHORT, what="a string")]
JobId = Annotated[str, Text(1, 64, valid_grant_id, "a job id (a-z 0-9 -, not starting with -)")]
Count = Annotated[int, Int(0, 2**53)]

MAX_WAIT_MS = 30_000
MAX_PREVIEW = 64 * 1024  # bytes of a write_file preview, its note of a cut included (§12.2)
MAX_OUTPUT_SHOWN = 16 * 1024  # bytes of a tool's output in `tool_done`, its note included
Preview = Annotated[str, Text(0, MAX_PREVIEW, what="a preview of at most 64 KiB")]
OutputShown = Annotated[str, Text(0, MAX_OUTPUT_SHOWN, what="an output of at most 16 KiB")]


def short(text: str) -> str:
    """`text` cut to what a `Short` field holds: 4096 bytes of UTF-8, on a character's edge."""
    if len(text) <= MAX_SHORT // 4:  # no character is more than 4 bytes
        return text
    data = text.encode("utf-8", "replace")
    return text if len(data) <= MAX_SHORT else data[: MAX_SHORT - 3].decode("utf-8", "ignore") + "…"


class ErrorCode(enum.StrEnum):
    BAD_MESSAGE = "bad_message"
    WRONG_SOCKET = "wrong_socket"
    ALREADY_SETTLED = "already_settled"
    UNKNOWN_APPROVAL = "unknown_approval"
    UNAVAILABLE = "unavailable"
    INVALID = "invalid"  # the owner's request cannot be carried out as asked; the message says why
    INTERNAL = "internal"


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


class ServiceState(enum.StrEnum):
    """A supervised service's life (§13): the supervisor's table says how it moves."""

    STARTING = "starting"
    RUNNING = "running"
    BACKOFF = "backoff"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"


class EndReason(enum.StrEnum):
    DONE = "done"
    MAX_STEPS = "max_steps"
    ERROR = "error"
    CANCELLED = "cancelled"  # the owner stopped the turn (`cancel`, §12.2)
    BUDGET = "budget"  # its token budget, or the box's for the day, is spent (§19)


# --- common (§3.4) -------------------------------------------------------------------------


@frozen
class Ping:
    TYPE: ClassVar[str] = "ping"
    id: RequestId


@frozen
class Pong:
    TYPE: ClassVar[str] = "pong"
    id: RequestId
    service: Short
    pid: Count
    version: Short
    started: Short


@frozen
class Error:
    TYPE: ClassVar[str] = "error"
    id: RequestId
    code: ErrorCode
    message: Short


# --- the broker socket (§3.3) --------------------------------------------------------------


@frozen
class ToolRequest:
    TYPE: ClassVar[str] = "tool_request"
    id: RequestId
    session: Session
    call: CallId
    tool: ToolId
    arguments: str


@frozen
class Done:
    TAG: ClassVar[str] = "done"
    ok: bool
    output: str
    label: Label


@frozen
class Denied:
    TAG: ClassVar[str] = "denied"
    reason: DenyReason
    detail: Short | None = None


@frozen
class Pending:
    TAG: ClassVar[str] = "pending"
    approval: ApprovalId


@frozen
class Failed:
    TAG: ClassVar[str] = "error"
    message: Short


Outcome = Done | Denied | Pending | Failed


@frozen
class ToolResponse:
    TYPE: ClassVar[str] = "tool_response"
    id: RequestId
    outcome: Annotated[Outcome, Flat("outcome")]


@frozen
class AwaitApproval:
    TYPE: ClassVar[str] = "await_approval"
    id: RequestId
    session: Session
    approval: ApprovalId
    wait_ms: Annotated[int, Int(0, MAX_WAIT_MS)]


@frozen
class Absorb:
    TYPE: ClassVar[str] = "absorb"
    id: RequestId
    session: Session
    child: Session


@frozen
class StateQuery:
    TYPE: ClassVar[str] = "state_query"
    id: RequestId
    session: Session


@frozen
class State:
    TYPE: ClassVar[str] = "state"
    id: RequestId
    session: Session
    label: Label


MCP_TOOL_NAME = re.compile(r"mcp__[a-zA-Z0-9_-]{1,59}")  # §18.4: `mcp__<server>__<tool>`
McpToolName = Annotated[
    str,
    Text(5, 64, lambda s: MCP_TOOL_NAME.fullmatch(s) is not None, "an MCP tool's model name"),
]


@frozen
class ToolsQuery:
    """loopd, at a turn's start: the MCP tools to offer the model (§18.4)."""

    TYPE: ClassVar[str] = "tools_query"
    id: RequestId


@frozen
class OfferedTool:
    """One pinned, unchanged MCP tool as the model is offered it: its pinned description, and
    its pinned inputSchema as canonical JSON text (a JSON object)."""

    name: McpToolName
    description: str
    input_schema: str


@frozen
class Tools:
    TYPE: ClassVar[str] = "tools"
    id: RequestId
    tools: tuple[OfferedTool, ...]


class JobWhy(enum.StrEnum):
    """Why a job's run started (§19)."""

    SCHEDULE = "schedule"  # its slot came, on time
    CATCH_UP = "catch_up"  # for slots missed while the box was down (`catch_up = "once"`)
    OWNER = "owner"  # `bxctl job run`


class JobEnd(enum.StrEnum):
    """How a job's run ended (§19)."""

    DONE = "done"  # the model answered
    BUDGET = "budget"  # max_steps (or max_tokens) reached
    RUNTIME = "runtime"  # max_runtime_s passed, approvals waiting included
    DENIED = "denied"  # the owner refused one of its calls, or let it expire
    ERROR = "error"  # the model server or brokerd failed
    CANCELLED = "cancelled"  # the owner stopped it


@frozen
class JobStarted:
    """loopd, before a job's run `run` begins: record `job_started` (§19). Answered
    `job_recorded` once the record is durable; asked again for the same run, answered from the
    first record (`first` false), writing nothing."""

    TYPE: ClassVar[str] = "job_started"
    id: RequestId
    job: JobId
    run: Annotated[int, Int(1, 2**53)]
    why: JobWhy
    job_sha256: Sha256
    slot: Short | None = None  # the scheduled time it runs for (RFC 3339), when it has one
    missed: Count = 0  # slots that passed with no run of their own


@frozen
class JobEnded:
    """loopd, when a job's run has ended: record `job_ended` with its figures (§19)."""

    TYPE: ClassVar[str] = "job_ended"
    id: RequestId
    job: JobId
    run: Annotated[int, Int(1, 2**53)]
    how: JobEnd
    steps: Count
    runtime_ms: Count
    tokens: Count | None = None  # when the model server's usage figures are known
    detail: Short | None = None  # one line for the owner: which limit, which call


@frozen
class JobRecorded:
    TYPE: ClassVar[str] = "job_recorded"
    id: RequestId
    job: JobId
    run: Annotated[int, Int(1, 2**53)]
    seq: Count  # the record's in the ledger
    first: bool  # false: the run was recorded so before, and nothing was written now


# --- the admin socket (§3.6, §9, §13) --------------------------------------------------------


@frozen
class VerdictRequest:
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


@frozen
class PendingQuery:
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
class GrantsReload:
    TYPE: ClassVar[str] = "grants_reload"
    id: RequestId


@frozen
class GrantList:
    TYPE: ClassVar[str] = "grant_list"
    id: RequestId
    grants: tuple[GrantInfo, ...]


@frozen
class GrantAdd:
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
class GrantRemove:
    """Remove one grant file; answered with the new `grant_list`."""

    TYPE: ClassVar[str] = "grant_remove"
    id: RequestId
    grant: Short


@frozen
class AuditTail:
    TYPE: ClassVar[str] = "audit_tail"
    id: RequestId
    n: Annotated[int, Int(1, 100_000)]
    session: Session | None = None


@frozen
class JobHistoryQuery:
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
class AuditVerify:
    TYPE: ClassVar[str] = "audit_verify"
    id: RequestId


@frozen
class AuditAccept:
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


@frozen
class Explain:
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
class NotesQuery:
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


# --- the loop socket and loop-events (§10) ---------------------------------------------------


@frozen
class OwnerMessage:
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
class Cancel:
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
class JobRun:
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
class SessionsQuery:
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
class HistoryQuery:
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
class TokensQuery:
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


# --- the supervisor socket (§13) -----------------------------------------------------------


@frozen
class ServiceInfo:
    """One supervised service: its state, process, restarts and how it last ended."""

    name: Short
    state: ServiceState
    restarts: Count
    since: Short  # when it entered its state
    pid: Count | None = None
    last_exit: Short | None = None  # "exit 1", "signal 9"


@frozen
class SupervisorStatus:
    TYPE: ClassVar[str] = "supervisor_status"
    id: RequestId


@frozen
class SupervisorRestart:
    """Restart one service, or all of them in order when `service` is absent."""

    TYPE: ClassVar[str] = "supervisor_restart"
    id: RequestId
    service: Short | None = None


@frozen
class SupervisorStop:
    """Stop one service (it stays stopped), or the whole box when `service` is absent."""

    TYPE: ClassVar[str] = "supervisor_stop"
    id: RequestId
    service: Short | None = None


@frozen
class SupervisorReport:
    TYPE: ClassVar[str] = "supervisor_report"
    id: RequestId
    pid: Count
    sandbox: Short  # the [sandbox] mode: "bwrap" or "none" (UNSANDBOXED)
    services: tuple[ServiceInfo, ...]
    console: Short | None = None  # the console's URL, when gatewayd serves one


# --- the gateway socket (§12): what `bxctl chat` needs -----------------------------------


@frozen
class EventsQuery:
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
