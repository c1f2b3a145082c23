"""What every message of `bxcore.wire.messages` is made of (SPEC §3): the checked field types
(request ids, sessions, call ids, short strings, counts...) and `short`, which cuts a text to
fit; the error codes; and the messages common to every socket (§3.4), `ping`, `pong` and
`error`. Pure: no I/O."""

from __future__ import annotations

import enum
import re
from typing import TYPE_CHECKING, Annotated, ClassVar, Generic, TypeVar

from bxcore.frozen import frozen
from bxcore.ids import MAX_CALL_ID, MAX_REQUEST_ID, MAX_TOOL_NAME, valid_grant_id, valid_session
from bxcore.wire.schema import Int, Text

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


A = TypeVar("A", covariant=True)


class Asks(Generic[A]):
    """The base of every request: `class PendingQuery(Asks["PendingList"])` says what answers it
    (an `error` can answer any request, §3.4). mypy reads it, so `Client.ask` is typed with the
    answer, and `bxcore.wire.asking.answer_of` reads the same at run time to check an answer
    once."""

    __slots__ = ()
    if TYPE_CHECKING:
        TYPE: ClassVar[str]

        @property
        def id(self) -> str: ...


# --- common (§3.4) -------------------------------------------------------------------------


@frozen
class Ping(Asks["Pong"]):
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
