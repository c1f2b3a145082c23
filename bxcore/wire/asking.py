"""How each request is asked (issue 25): on which socket, answered with what, and how patiently.

A request names its answer by its base (`class PendingQuery(Asks["PendingList"])`, in
`bxcore.wire.messages`); `answer_of` reads that at run time, so that `bxcore.client` checks an
answer once and no caller does. `PATIENCE` gives each socket's requests their tries and wait
with the reason for them: a request is retried only where a repeat cannot make anything happen
twice (the server answers it from its first answer, or it changes nothing). A caller that knows
better (a tool call that may run for minutes) passes its own `Patience`, saying why. Pure."""

from __future__ import annotations

import sys
import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ForwardRef, get_args

from bxcore.wire.messages import (
    Absorb,
    Asks,
    AuditAccept,
    AuditTail,
    AuditVerify,
    AwaitApproval,
    Cancel,
    EventsQuery,
    Explain,
    GrantAdd,
    GrantRemove,
    GrantsReload,
    HistoryQuery,
    JobEnded,
    JobHistoryQuery,
    JobRun,
    JobStarted,
    LedgerQuery,
    NotesQuery,
    OwnerMessage,
    OwnerWords,
    PendingQuery,
    Ping,
    SessionsQuery,
    StateQuery,
    SupervisorRestart,
    SupervisorStatus,
    SupervisorStop,
    TokensQuery,
    ToolRequest,
    ToolsQuery,
    VerdictRequest,
)

#: The service that serves each socket, as error lines name it.
SERVICE = {
    "broker": "brokerd",
    "admin": "brokerd",
    "loop": "loopd",
    "memory": "memoryd",
    "gateway": "gatewayd",
    "supervisor": "the supervisor",
}


@dataclass(frozen=True, slots=True)
class Patience:
    """Send a request up to `tries` times, waiting `timeout_s` for each answer (plus the
    request's own `wait_ms` for a long poll); `why` says why so much and no more."""

    tries: int
    timeout_s: float
    why: str
    long_poll: bool = False

    def wait_s(self, request: object) -> float:
        """How long one try waits for the answer to `request`."""
        if self.long_poll:
            return self.timeout_s + getattr(request, "wait_ms", 0) / 1000
        return self.timeout_s


_CHANGES_NOTHING = "a question that changes nothing: asked again while it is not answered"
_ONCE_A_TRY = "answered from the first answer when repeated, so a retry cannot act twice"
_READ = Patience(2, 5.0, _CHANGES_NOTHING)
_PING = Patience(2, 3.0, "is it up? a live service answers a ping at once")

_RECORDED_ONCE = f"brokerd records a job's run once: {_ONCE_A_TRY}"

#: Each socket's requests (SPEC §3), and how patiently each is asked there.
PATIENCE: Mapping[str, Mapping[type[Any], Patience]] = {
    "broker": {
        Ping: _PING,
        ToolRequest: Patience(3, 10.0, f"a repeat of a call id joins the call (I8): {_ONCE_A_TRY}"),
        AwaitApproval: Patience(3, 10.0, "a long poll, then 10 s for its answer", long_poll=True),
        Absorb: Patience(6, 5.0, "taking a label on twice changes nothing; the turn needs it"),
        StateQuery: _READ,
        ToolsQuery: Patience(1, 2.0, "a turn waits no longer for them: it offers the last list"),
        JobStarted: Patience(3, 10.0, _RECORDED_ONCE),
        JobEnded: Patience(3, 10.0, _RECORDED_ONCE),
        OwnerWords: Patience(2, 5.0, "kept once a turn; those not kept are given at the next call"),
    },
    "admin": {
        Ping: _PING,
        VerdictRequest: Patience(1, 15.0, "once: a repeat is `already settled`, hiding its answer"),
        PendingQuery: _READ,
        GrantsReload: _READ,
        AuditTail: _READ,
        AuditVerify: Patience(1, 60.0, "a whole ledger read and hashed: a retry would start over"),
        AuditAccept: Patience(1, 600.0, "sent once: the whole ledger is read and written again"),
        StateQuery: _READ,
        Explain: _READ,
        GrantAdd: Patience(1, 15.0, "sent once: a repeat would find the grant's file written"),
        GrantRemove: Patience(1, 15.0, "sent once: a repeat would find the grant gone"),
        NotesQuery: Patience(2, 12.0, "changes nothing; brokerd asks memoryd, 5 s a try twice"),
        JobHistoryQuery: _READ,
        LedgerQuery: Patience(1, 3.0, "answered at once, even while loading: longer is stuck"),
    },
    "loop": {
        Ping: _PING,
        OwnerMessage: Patience(1, 10.0, "sent once: loopd would run a repeat as a second turn"),
        SessionsQuery: _READ,
        HistoryQuery: _READ,
        Cancel: Patience(1, 20.0, "answered when the turn has ended, which it does at once"),
        TokensQuery: Patience(1, 2.0, "the day's count is a nicety: never waited for long"),
        JobRun: Patience(1, 10.0, "sent once: loopd would start a repeat as a second run"),
    },
    "memory": {
        Ping: _PING,
        ToolRequest: Patience(2, 5.0, f"memoryd keeps each call's answer: {_ONCE_A_TRY}"),
        NotesQuery: _READ,
    },
    "gateway": {
        Ping: _PING,
        EventsQuery: Patience(3, 5.0, "a long poll, asked across a restart", long_poll=True),
        OwnerMessage: Patience(3, 12.0, f"gatewayd keeps each message's answer: {_ONCE_A_TRY}"),
        VerdictRequest: Patience(3, 20.0, f"gatewayd keeps each answer: {_ONCE_A_TRY}"),
        PendingQuery: Patience(1, 5.0, "gatewayd answers from what it holds"),
        Cancel: Patience(3, 25.0, f"gatewayd's id is made from the request: {_ONCE_A_TRY}"),
    },
    "supervisor": {
        Ping: _PING,
        SupervisorStatus: Patience(1, 5.0, "answered from what it holds: longer means it is stuck"),
        SupervisorRestart: Patience(1, 180.0, "answered once it runs: 10 s and 5 backoffs"),
        SupervisorStop: Patience(1, 5.0, "answered at once; the box then stops on its own"),
    },
}


def patience(socket: str, request: object) -> Patience:
    """How `request` is asked on `socket`; a KeyError is a request the socket does not take."""
    return PATIENCE[socket][type(request)]


def answer_of(kind: type[Any]) -> tuple[type[Any], ...]:
    """The types that answer a request of `kind`, as its `Asks[...]` base names them."""
    known = _ANSWERS.get(kind)
    if known is None:
        known = _ANSWERS[kind] = _read_answer(kind)
    return known


_ANSWERS: dict[type[Any], tuple[type[Any], ...]] = {}


def _read_answer(kind: type[Any]) -> tuple[type[Any], ...]:
    for base in getattr(kind, "__orig_bases__", ()):
        if getattr(base, "__origin__", None) is Asks:
            (named,) = get_args(base)
            if isinstance(named, ForwardRef):  # a name, in the request's module
                named = vars(sys.modules[kind.__module__])[named.__forward_arg__]
            return get_args(named) if isinstance(named, types.UnionType) else (named,)
    raise TypeError(f"{kind.__name__} is no request: it does not say what answers it")


def table_markdown() -> str:
    """The table as `docs/architecture.md` shows it."""
    rows = ["| socket | request | answer | tries | wait | why |", "|---|---|---|---|---|---|"]
    for socket, requests in PATIENCE.items():
        for kind, each in requests.items():
            answer = " \\| ".join(str(getattr(t, "TYPE", t.__name__)) for t in answer_of(kind))
            wait = f"{each.timeout_s:g} s" + (" + its wait" if each.long_poll else "")
            row = (socket, kind.TYPE, answer, str(each.tries), wait, each.why)
            rows.append(f"| {' | '.join(row)} |")
    return "\n".join(rows) + "\n"
