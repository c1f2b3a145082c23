"""What each ROUTER socket takes and what it answers (SPEC §2.3): one union of request types a
socket, and one of its answers, so that a socket's dispatch table (`bxcore.router.Routes`) and
its handlers are typed with the messages themselves.

Pure: types only. `ping` is in no union: every router answers it itself (§3.4).
"""

from __future__ import annotations

from bxcore.wire.messages import (
    Absorb,
    Accepted,
    AuditAccept,
    AuditRecords,
    AuditReport,
    AuditTail,
    AuditVerify,
    AwaitApproval,
    Cancel,
    Cancelled,
    Error,
    Events,
    EventsQuery,
    Explain,
    Explanation,
    GrantAdd,
    GrantList,
    GrantRemove,
    GrantsReload,
    History,
    HistoryQuery,
    JobEnded,
    JobHistoryQuery,
    JobRecorded,
    JobRun,
    JobRunStarted,
    JobStarted,
    LedgerQuery,
    LedgerStatus,
    Notes,
    NotesQuery,
    OwnerMessage,
    OwnerWords,
    PendingList,
    PendingQuery,
    SessionList,
    SessionsQuery,
    Settled,
    State,
    StateQuery,
    SupervisorReport,
    SupervisorRestart,
    SupervisorStatus,
    SupervisorStop,
    Tokens,
    TokensQuery,
    ToolRequest,
    ToolResponse,
    Tools,
    ToolsQuery,
    VerdictRequest,
    WordsKept,
)

# brokerd's `broker` socket: loopd's and memoryd's tool calls and label questions (§3.3).
# A job's run is recorded there too (§19): loopd's word, checked and written by brokerd.
BrokerRequest = (
    ToolRequest
    | AwaitApproval
    | Absorb
    | StateQuery
    | ToolsQuery
    | JobStarted
    | JobEnded
    | OwnerWords
)
BrokerAnswer = ToolResponse | State | Tools | JobRecorded | WordsKept | Error

# brokerd's `admin` socket: the owner's side (§3.6, §9, §13).
AdminRequest = (
    VerdictRequest
    | PendingQuery
    | GrantsReload
    | AuditTail
    | AuditVerify
    | AuditAccept
    | StateQuery
    | Explain
    | GrantAdd
    | GrantRemove
    | NotesQuery
    | JobHistoryQuery
    | LedgerQuery
)
AdminAnswer = (
    Settled
    | PendingList
    | GrantList
    | AuditRecords
    | AuditReport
    | State
    | Explanation
    | Notes
    | LedgerStatus
    | Error
)

# loopd's `loop` socket: owner messages, stopping a turn and the sessions' histories (§10).
LoopRequest = OwnerMessage | SessionsQuery | HistoryQuery | Cancel | TokensQuery | JobRun
LoopAnswer = Accepted | SessionList | History | Cancelled | Tokens | JobRunStarted | Error

# memoryd's `memory` socket: brokerd's memory calls (§11).
MemoryRequest = ToolRequest | NotesQuery
MemoryAnswer = ToolResponse | Notes | Error

# gatewayd's `gateway` socket: what `bxctl chat` needs, Stop too (§12).
GatewayRequest = EventsQuery | OwnerMessage | VerdictRequest | PendingQuery | Cancel
GatewayAnswer = Events | Accepted | Settled | PendingList | Cancelled | Error

# the supervisor's socket (`bxctl up`, §13).
SupervisorRequest = SupervisorStatus | SupervisorRestart | SupervisorStop
SupervisorAnswer = SupervisorReport | Error
