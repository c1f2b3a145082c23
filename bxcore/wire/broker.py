"""The broker socket's messages (SPEC §3.3): what loopd asks brokerd on a session's behalf. A
tool call and its outcome, an approval awaited, a sub-agent's session absorbed, a session's
label, the MCP tools to offer the model (§18.4), and the records of a job's run (§19).
Pure: no I/O.
"""

from __future__ import annotations

import enum
import re
from typing import Annotated, ClassVar

from bxcore.deny import DenyReason
from bxcore.frozen import frozen
from bxcore.labels import Label
from bxcore.wire.common import (
    MAX_WAIT_MS,
    ApprovalId,
    Asks,
    CallId,
    Count,
    JobId,
    RequestId,
    Session,
    Sha256,
    Short,
    ToolId,
)
from bxcore.wire.schema import Flat, Int, Text


@frozen
class ToolRequest(Asks["ToolResponse"]):
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
class AwaitApproval(Asks["ToolResponse"]):
    TYPE: ClassVar[str] = "await_approval"
    id: RequestId
    session: Session
    approval: ApprovalId
    wait_ms: Annotated[int, Int(0, MAX_WAIT_MS)]


@frozen
class Absorb(Asks["State"]):
    TYPE: ClassVar[str] = "absorb"
    id: RequestId
    session: Session
    child: Session


@frozen
class StateQuery(Asks["State"]):
    TYPE: ClassVar[str] = "state_query"
    id: RequestId
    session: Session


@frozen
class State:
    TYPE: ClassVar[str] = "state"
    id: RequestId
    session: Session
    label: Label


MAX_OWNER_WORDS = 256 * 1024  # bytes of one turn's words: loopd sends the start of more
Turn = Annotated[int, Int(1, 2**53)]


@frozen
class OwnerWords(Asks["WordsKept"]):
    """loopd, before a turn's first tool call: what the owner typed for turn `turn` of
    `session` (or, for a job's run, the job's prompt), which brokerd keeps as the session's
    owner's words (§20). Sent again for the same turn, the first words stand; a sub-agent's
    session never takes any (its task is the model's text)."""

    TYPE: ClassVar[str] = "owner_words"
    id: RequestId
    session: Session
    turn: Turn
    text: Annotated[str, Text(0, MAX_OWNER_WORDS, what="at most 256 KiB of text")]


@frozen
class WordsKept:
    TYPE: ClassVar[str] = "words_kept"
    id: RequestId
    session: Session
    turn: Turn
    first: bool  # false: this turn's words were kept before, and nothing was written now


MCP_TOOL_NAME = re.compile(r"mcp__[a-zA-Z0-9_-]{1,59}")  # §18.4: `mcp__<server>__<tool>`
McpToolName = Annotated[
    str,
    Text(5, 64, lambda s: MCP_TOOL_NAME.fullmatch(s) is not None, "an MCP tool's model name"),
]


@frozen
class ToolsQuery(Asks["Tools"]):
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
class JobStarted(Asks["JobRecorded"]):
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
class JobEnded(Asks["JobRecorded"]):
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
