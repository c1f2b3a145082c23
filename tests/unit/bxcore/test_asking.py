"""How each request is asked (issue 25): every socket's requests have an answer and a patience
with its reason, and an answer of the wrong type is one error, `WrongAnswer`, at the client."""

from __future__ import annotations

import threading
import typing
from pathlib import Path

import pytest
import zmq

from bxcore.client import AskFailed, SyncClient, WrongAnswer
from bxcore.wire import codec as wire
from bxcore.wire import messages, sockets
from bxcore.wire.asking import PATIENCE, SERVICE, Patience, answer_of, patience, table_markdown
from bxcore.wire.messages import Asks, Ping, Pong, StateQuery

UNIONS = {
    "broker": sockets.BrokerRequest,
    "admin": sockets.AdminRequest,
    "loop": sockets.LoopRequest,
    "memory": sockets.MemoryRequest,
    "gateway": sockets.GatewayRequest,
    "supervisor": sockets.SupervisorRequest,
}


@pytest.mark.parametrize("socket", sorted(UNIONS))
def test_each_socket_s_table_is_exactly_its_requests_and_ping(socket: str) -> None:
    assert set(PATIENCE[socket]) == {*typing.get_args(UNIONS[socket]), Ping}
    assert socket in SERVICE


def test_every_request_names_an_answer_that_is_a_message() -> None:
    requests = [
        kind for kind in vars(messages).values()
        if isinstance(kind, type) and issubclass(kind, Asks) and kind is not Asks
    ]  # fmt: skip
    assert len(requests) >= 30
    for kind in requests:
        for answer in answer_of(kind):
            assert getattr(messages, answer.__name__) is answer, (kind, answer)
            assert not issubclass(answer, Asks), (kind, answer)


def test_each_patience_says_why_and_tries_at_least_once() -> None:
    for requests in PATIENCE.values():
        for each in requests.values():
            assert each.tries >= 1 and each.timeout_s > 0 and each.why.strip()


def test_a_long_poll_waits_for_the_wait_it_asks_for_too() -> None:
    query = messages.EventsQuery("e1", "chat-1", 0, 30_000)
    assert patience("gateway", query).wait_s(query) == 35.0
    assert patience("admin", messages.PendingQuery("p1")).wait_s(messages.PendingQuery("p1")) == 5


def test_an_owner_message_to_loopd_is_sent_once() -> None:
    assert PATIENCE["loop"][messages.OwnerMessage].tries == 1
    assert "second turn" in PATIENCE["loop"][messages.OwnerMessage].why


def test_the_table_is_drawn_for_the_docs() -> None:
    table = table_markdown()
    assert "| loop | owner_message | accepted | 1 | 10 s |" in table
    assert table.count("\n") == 2 + sum(len(r) for r in PATIENCE.values())


def test_an_answer_of_the_wrong_type_is_a_wrong_answer(short_tmp: Path) -> None:
    endpoint = f"ipc://{short_tmp}/wrong.sock"
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    server = context.socket(zmq.ROUTER)
    server.setsockopt(zmq.LINGER, 0)
    server.bind(endpoint)

    def answer_with_a_pong() -> None:
        identity, frame = server.recv_multipart()
        asked = wire.decode(frame)
        server.send_multipart([identity, wire.encode(Pong(asked.id, "x", 1, "0", "now"))])

    thread = threading.Thread(target=answer_with_a_pong, daemon=True)
    thread.start()
    try:
        with SyncClient(endpoint, socket="broker") as client:
            with pytest.raises(
                WrongAnswer, match=r"^brokerd answered pong to state_query$"
            ) as caught:
                client.ask(StateQuery("w1", "chat-1"), patience=Patience(1, 5.0, "a test"))
            assert isinstance(caught.value, AskFailed) and caught.value.kind == "wrong answer"
            assert not client.connected
    finally:
        thread.join(5)
        context.destroy(linger=0)


def test_docs_architecture_holds_the_table_as_the_code_draws_it() -> None:
    docs = Path(__file__).resolve().parents[3] / "docs" / "architecture.md"
    assert table_markdown() in docs.read_text()
