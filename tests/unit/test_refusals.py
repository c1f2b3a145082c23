"""What each socket answers to a message it does not take, word for word as before the
dispatch tables (issue 11): the clients and the service tests read these texts."""

from __future__ import annotations

import pytest

from bxcore.routes import Refusal
from bxcore.wire.messages import (
    Error,
    ErrorCode,
    LedgerHead,
    Pong,
    SessionsQuery,
    StateQuery,
    ToolRequest,
)
from bxctl.supervisor.runner import REFUSAL as SUPERVISOR
from services.gatewayd.gateway import REFUSAL as GATEWAY
from services.loopd.daemon import REFUSAL as LOOP
from services.memoryd.daemon import REFUSAL as MEMORY

BAD, WRONG = ErrorCode.BAD_MESSAGE, ErrorCode.WRONG_SOCKET
HEAD = LedgerHead(1, "0" * 64)


@pytest.mark.parametrize(
    ("refusal", "message", "answer"),
    [
        (LOOP, Pong("x", "d", 1, "0", "now"), Error("x", BAD, "loopd does not take pong")),
        (LOOP, StateQuery("x", "s"), Error("x", BAD, "loopd does not take state_query")),
        (LOOP, HEAD, None),
        (
            GATEWAY,
            SessionsQuery("g"),
            Error("g", BAD, "the gateway socket does not take sessions_query"),
        ),
        (GATEWAY, HEAD, None),
        (
            MEMORY,
            StateQuery("m", "s"),
            Error("m", BAD, "memoryd takes only memory tool_request and notes_query"),
        ),
        (MEMORY, HEAD, None),
        (
            SUPERVISOR,
            ToolRequest("t", "s", "c", "read_file", "{}"),
            Error("t", WRONG, "tool_request is not answered on the supervisor socket"),
        ),
        (
            SUPERVISOR,
            HEAD,
            Error("?", WRONG, "ledger_head is not answered on the supervisor socket"),
        ),
    ],
)
def test_each_socket_refuses_as_it_always_did(
    refusal: Refusal, message: object, answer: Error | None
) -> None:
    assert refusal.answer(message) == answer
