"""A socket's dispatch table: each request type to its handler, every other message to the
socket's refusal, and a table that does not cover its socket's union exactly is refused."""

from __future__ import annotations

import pytest

from bxcore.labels import SESSION_DEFAULT
from bxcore.routes import Refusal, Route, Routes
from bxcore.wire.messages import (
    Absorb,
    Error,
    ErrorCode,
    History,
    HistoryQuery,
    LedgerHead,
    Pong,
    Scope,
    SessionList,
    SessionsQuery,
    State,
    StateQuery,
    VerdictRequest,
)

pytestmark = pytest.mark.anyio

REFUSAL = Refusal("testd does not take {type}")


async def sessions(message: SessionsQuery) -> SessionList:
    return SessionList(message.id, ())


async def history(message: HistoryQuery) -> History:
    return History(message.id, message.session, ())


def table() -> Routes[SessionList | History]:
    return Routes(
        SessionsQuery | HistoryQuery,
        REFUSAL,
        Route(SessionsQuery, sessions),
        Route(HistoryQuery, history),
    )


async def test_each_request_goes_to_the_handler_of_its_type() -> None:
    assert await table().dispatch(SessionsQuery("s1")) == SessionList("s1", ())
    assert await table().dispatch(HistoryQuery("h1", "chat")) == History("h1", "chat", ())


@pytest.mark.parametrize(
    ("message", "answer"),
    [
        (
            StateQuery("x1", "s"),
            Error("x1", ErrorCode.BAD_MESSAGE, "testd does not take state_query"),
        ),
        (
            Pong("x2", "d", 1, "0", "now"),
            Error("x2", ErrorCode.BAD_MESSAGE, "testd does not take pong"),
        ),
        (LedgerHead(1, "0" * 64), None),  # no id: nothing to answer to
    ],
)
async def test_any_other_message_gets_the_refusal(message: object, answer: Error | None) -> None:
    assert await table().dispatch(message) == answer


def test_a_type_that_belongs_elsewhere_is_wrong_socket_with_its_own_text() -> None:
    refusal = Refusal("brokerd does not take {type}", elsewhere={VerdictRequest: "admin only"})
    verdict = VerdictRequest("v1", "abcdefgh", True, Scope.ONCE, "me")
    assert refusal.answer(verdict) == Error("v1", ErrorCode.WRONG_SOCKET, "admin only")
    assert refusal.answer(Absorb("a1", "s", "t")) == Error(
        "a1", ErrorCode.BAD_MESSAGE, "brokerd does not take absorb"
    )


def test_an_anonymous_message_gets_the_id_given_for_it() -> None:
    refusal = Refusal("{type}: no", ErrorCode.WRONG_SOCKET, anonymous="?")
    assert refusal.answer(LedgerHead(1, "0" * 64)) == Error(
        "?", ErrorCode.WRONG_SOCKET, "ledger_head: no"
    )


async def state(message: StateQuery) -> State:
    return State(message.id, message.session, SESSION_DEFAULT)


@pytest.mark.parametrize(
    "routes",
    [
        (Route(SessionsQuery, sessions),),  # history_query has no handler
        (Route(SessionsQuery, sessions), Route(HistoryQuery, history), Route(StateQuery, state)),
        (
            Route(SessionsQuery, sessions),
            Route(SessionsQuery, sessions),
            Route(HistoryQuery, history),
        ),
    ],
    ids=["missing", "extra", "twice"],
)
def test_a_table_that_does_not_cover_its_union_once_is_refused(
    routes: tuple[Route[object, object], ...],
) -> None:
    with pytest.raises(TypeError, match="does not cover its socket's"):
        Routes(SessionsQuery | HistoryQuery, REFUSAL, *routes)


async def test_a_table_of_nothing_refuses_everything() -> None:
    nothing: Routes[Error] = Routes((), Refusal("only ping", ErrorCode.WRONG_SOCKET))
    assert await nothing.dispatch(SessionsQuery("n1")) == Error(
        "n1", ErrorCode.WRONG_SOCKET, "only ping"
    )
