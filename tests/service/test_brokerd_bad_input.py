"""Bad input on both of brokerd's sockets changes nothing and brokerd serves on (SPEC §3.1,
§3.6, I6, I7).

Frames that do not decode are answered `bad_message` where an id could be read and dropped
otherwise; admin messages on the broker socket and broker messages on the admin socket are
`wrong_socket`; a client without an allowed CURVE key gets no answer on the admin socket.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from bxcore import curve
from bxcore.wire import codec as wire
from bxcore.wire.messages import (
    Absorb,
    AuditTail,
    AuditVerify,
    AwaitApproval,
    Error,
    ErrorCode,
    Explain,
    GrantAdd,
    GrantRemove,
    GrantsReload,
    NotesQuery,
    OwnerMessage,
    Pending,
    PendingList,
    PendingQuery,
    Ping,
    Pong,
    Scope,
    StateQuery,
    ToolRequest,
    VerdictRequest,
)
from tests.support.brokerd import RawClient, args, call, ledger_lines, short_folder
from tests.support.daemons import Daemon, init_home, running

SOCKETS = ["broker", "admin"]


@pytest.fixture(scope="module")
def brokerd() -> Iterator[Daemon]:
    with short_folder() as tmp:
        home = init_home(tmp / "h")
        with running("brokerd", home) as daemon:
            yield daemon


def snapshot(home: Path) -> tuple[bytes, list[str]]:
    """What bad input must not change: the ledger and the session labels."""
    folder = home / "state" / "broker"
    labels = sorted(p.name for p in folder.iterdir()) if folder.exists() else []
    return (home / "audit" / "ledger.jsonl").read_bytes(), labels


def pong_after(raw: RawClient, request_id: str) -> None:
    """The next answer on `raw` is the pong to a ping sent now: nothing came before it."""
    raw.send(wire.encode(Ping(request_id)))
    answer = raw.recv(10.0)
    assert answer is not None
    pong = wire.decode(answer)
    assert isinstance(pong, Pong) and pong.id == request_id, pong


DROPPED = [
    pytest.param(bytes(range(256)) * 4, id="random-bytes"),
    pytest.param(b"", id="empty-frame"),
    pytest.param(b'\xff\xfe{"type":"ping","id":"x"}', id="not-utf8"),
    pytest.param(b'{"type":"ping","id":"d1"} trailing', id="trailing-bytes"),
    pytest.param(b'{"type":"ping","id":"d2"}{}', id="two-objects"),
    pytest.param(b'[{"type":"ping","id":"d3"}]', id="an-array"),
    pytest.param(b'"ping"', id="a-string"),
    pytest.param(b"null", id="null"),
    pytest.param(b"{}", id="empty-object"),
    pytest.param(b'{"type":"ping"}', id="no-id"),
    pytest.param(b'{"type":"ping","id":""}', id="empty-id"),
    pytest.param(b'{"type":"ping","id":7}', id="id-not-a-string"),
    pytest.param(b'{"type":"ping","id":"d4","x":NaN}', id="nan"),
    pytest.param(b'{"type":"ping","id":"' + b"i" * 65 + b'"}', id="id-too-long"),
    pytest.param(b"[" * 100_000 + b"]" * 100_000, id="deep-nesting"),
    pytest.param(b'{"type":"ping","id":"\\ud800"}', id="id-lone-surrogate"),
    # Messages that carry no id (events, answers without one): nothing to answer to.
    pytest.param(b'{"type":"ledger_head","seq":1,"hash":"' + b"0" * 64 + b'"}', id="ledger-head"),
    pytest.param(
        b'{"type":"approval_settled","approval":"abcdefgh","session":"s","state":"approved"}',
        id="approval-settled",
    ),
    pytest.param(
        b'{"type":"turn_event","session":"s","turn":1,"seq":1,"event":{"kind":"turn_end",'
        b'"reason":"done"}}',
        id="turn-event",
    ),
]


@pytest.mark.parametrize("socket", SOCKETS)
@pytest.mark.parametrize("frame", DROPPED)
def test_a_frame_with_no_readable_id_is_dropped_and_the_next_request_is_served(
    brokerd: Daemon, socket: str, frame: bytes
) -> None:
    before = snapshot(brokerd.home)
    with RawClient(brokerd.home, socket) as raw:
        raw.send(frame)
        pong_after(raw, "after")
    assert snapshot(brokerd.home) == before


MULTI = [
    pytest.param([b'{"type":"ping","id":"m1"}', b'{"type":"ping","id":"m2"}'], id="two-pings"),
    pytest.param([b"", b'{"type":"ping","id":"m3"}'], id="empty-delimiter"),
    pytest.param([b'{"type":"state_query","id":"m4","session":"s"}', b""], id="empty-after"),
]


@pytest.mark.parametrize("socket", SOCKETS)
@pytest.mark.parametrize("frames", MULTI)
def test_a_message_of_several_frames_is_dropped_and_the_next_request_is_served(
    brokerd: Daemon, socket: str, frames: list[bytes]
) -> None:
    before = snapshot(brokerd.home)
    with RawClient(brokerd.home, socket) as raw:
        raw.send(frames)
        pong_after(raw, "after")
    assert snapshot(brokerd.home) == before


@pytest.mark.parametrize("socket", SOCKETS)
def test_a_frame_over_4_mib_gets_no_answer_and_brokerd_serves_on(
    brokerd: Daemon, socket: str
) -> None:
    before = snapshot(brokerd.home)
    big = b'{"type":"ping","id":"big","x":"' + b"a" * (4 * 1024 * 1024) + b'"}'
    with RawClient(brokerd.home, socket) as raw:
        raw.send(big)
        assert raw.recv(0.3) is None
    # Only just over: a tool call whose arguments take the frame past 4 MiB.
    request = wire.encode(ToolRequest("big2", "big", "c1", "write_file", "x" * 4 * 1024 * 1024))
    assert len(request) > wire.MAX_MESSAGE
    with RawClient(brokerd.home, socket) as raw:
        raw.send(request)
        assert raw.recv(0.3) is None
    with RawClient(brokerd.home, socket) as raw:
        pong_after(raw, "after")
    assert snapshot(brokerd.home) == before


BAD_MESSAGES = [
    pytest.param(
        {
            "type": "tool_request",
            "id": "b1",
            "session": "s",
            "call": 3,
            "tool": "read_file",
            "arguments": "{}",
        },
        id="wrong-type",
    ),
    pytest.param(
        {
            "type": "tool_request",
            "id": "b2",
            "session": "s",
            "call": "c",
            "tool": "read_file",
            "arguments": {"path": "/etc/passwd"},
        },
        id="arguments-not-a-string",
    ),
    pytest.param({"type": "frobnicate", "id": "b3"}, id="unknown-type"),
    pytest.param({"type": 7, "id": "b4"}, id="type-not-a-string"),
    pytest.param({"id": "b5"}, id="no-type"),
    pytest.param({"type": "state_query", "id": "b7", "session": "../etc"}, id="session-dotdot"),
    pytest.param({"type": "state_query", "id": "b8", "session": ".hidden"}, id="session-dot"),
    pytest.param({"type": "state_query", "id": "b9", "session": "-x"}, id="session-dash"),
    pytest.param({"type": "state_query", "id": "b10", "session": ""}, id="session-empty"),
    pytest.param({"type": "state_query", "id": "b11", "session": "s" * 129}, id="session-long"),
    pytest.param({"type": "state_query", "id": "b12", "session": "a b"}, id="session-space"),
    pytest.param({"type": "state_query", "id": "b13", "session": "é"}, id="session-non-ascii"),
    pytest.param({"type": "state_query", "id": "b14"}, id="missing-key"),
    pytest.param({"type": "state_query", "id": "b15", "session": "s", "x": 1}, id="unknown-key"),
    pytest.param({"type": "ping", "id": "b16", "extra": None}, id="unknown-null-key"),
    pytest.param(
        {
            "type": "tool_request",
            "id": "b17",
            "session": "s",
            "call": "",
            "tool": "read_file",
            "arguments": "{}",
        },
        id="empty-call-id",
    ),
    pytest.param(
        {
            "type": "tool_request",
            "id": "b18",
            "session": "s",
            "call": "c",
            "tool": "t" * 65,
            "arguments": "{}",
        },
        id="tool-name-too-long",
    ),
    pytest.param(
        {
            "type": "await_approval",
            "id": "b19",
            "session": "s",
            "approval": "abcdefgh",
            "wait_ms": 30_001,
        },
        id="wait-too-long",
    ),
    pytest.param(
        {
            "type": "await_approval",
            "id": "b20",
            "session": "s",
            "approval": "ABCDEFGH",
            "wait_ms": 10,
        },
        id="approval-id-shape",
    ),
    pytest.param(
        {
            "type": "verdict",
            "id": "b21",
            "approval": "abcdefgh",
            "approve": 1,
            "scope": "once",
            "by": "x",
        },
        id="approve-not-a-bool",
    ),
    pytest.param(
        {
            "type": "verdict",
            "id": "b22",
            "approval": "abcdefgh",
            "approve": True,
            "scope": "forever",
            "by": "x",
        },
        id="scope-unknown",
    ),
    pytest.param(
        {
            "type": "tool_request",
            "id": "b25",
            "session": "s",
            "call": "\ud800",
            "tool": "read_file",
            "arguments": "{}",
        },
        id="call-lone-surrogate",
    ),
    pytest.param(
        {
            "type": "tool_request",
            "id": "b26",
            "session": "s",
            "call": "c",
            "tool": "read_file\udfff",
            "arguments": "{}",
        },
        id="tool-lone-surrogate",
    ),
    pytest.param(
        {
            "type": "tool_request",
            "id": "b27",
            "session": "s",
            "call": "c",
            "tool": "read_file",
            "arguments": '{"path":"/\ud800"}',
        },
        id="arguments-lone-surrogate",
    ),
    pytest.param({"type": "audit_tail", "id": "b23", "n": 0}, id="tail-of-zero"),
    pytest.param({"type": "audit_tail", "id": "b24", "n": True}, id="tail-of-true"),
]


@pytest.mark.parametrize("socket", SOCKETS)
@pytest.mark.parametrize("message", BAD_MESSAGES)
def test_a_bad_message_with_a_readable_id_is_answered_bad_message_and_changes_nothing(
    brokerd: Daemon, socket: str, message: dict[str, object]
) -> None:
    before = snapshot(brokerd.home)
    with RawClient(brokerd.home, socket) as raw:
        answer = wire.decode(raw.ask(json.dumps(message).encode()))
        assert isinstance(answer, Error), answer
        assert (answer.id, answer.code) == (message["id"], ErrorCode.BAD_MESSAGE)
        assert answer.message and "\n" not in answer.message
        pong_after(raw, "after")
    assert snapshot(brokerd.home) == before


def test_a_key_given_twice_is_bad_message(brokerd: Daemon) -> None:
    for socket in SOCKETS:
        with RawClient(brokerd.home, socket) as raw:
            frame = b'{"type":"state_query","id":"dup","session":"a","session":"b"}'
            answer = wire.decode(raw.ask(frame))
            assert isinstance(answer, Error) and answer.code is ErrorCode.BAD_MESSAGE
            assert answer.id == "dup"


ADMIN_ONLY = [
    VerdictRequest("x1", "abcdefgh", True, Scope.ONCE, "the model"),
    PendingQuery("x2"),
    GrantsReload("x3"),
    AuditTail("x4", 10),
    AuditVerify("x5"),
    Explain("x6", "s", "read_file", "{}"),
    # The model's side may not write itself a grant, remove one, or read every note.
    GrantAdd("x7", "everything", "shell", "allow", "private", path="/"),
    GrantRemove("x8", "workspace-read"),
    NotesQuery("x9"),
]


@pytest.mark.parametrize("message", ADMIN_ONLY, ids=lambda m: m.TYPE)
def test_an_admin_message_on_the_broker_socket_is_wrong_socket(
    brokerd: Daemon, message: Any
) -> None:
    before = snapshot(brokerd.home)
    answer = brokerd.ask(message)
    assert isinstance(answer, Error) and answer.code is ErrorCode.WRONG_SOCKET, answer
    assert answer.id == message.id
    assert snapshot(brokerd.home) == before


BROKER_ONLY = [
    ToolRequest("y1", "s", "c1", "write_file", "{}"),
    AwaitApproval("y2", "s", "abcdefgh", 10),
    Absorb("y3", "s", "t"),
]


@pytest.mark.parametrize("message", BROKER_ONLY, ids=lambda m: m.TYPE)
def test_a_broker_message_on_the_admin_socket_is_wrong_socket(
    brokerd: Daemon, message: Any
) -> None:
    before = snapshot(brokerd.home)
    answer = brokerd.ask(message, socket="admin")
    assert isinstance(answer, Error) and answer.code is ErrorCode.WRONG_SOCKET, answer
    assert snapshot(brokerd.home) == before


@pytest.mark.parametrize("socket", SOCKETS)
def test_a_message_of_another_service_is_bad_message(brokerd: Daemon, socket: str) -> None:
    answer = brokerd.ask(OwnerMessage("z1", "s", "hello"), socket=socket)
    assert isinstance(answer, Error) and answer.code is ErrorCode.BAD_MESSAGE, answer


def test_a_client_without_an_allowed_curve_key_gets_no_answer_on_the_admin_socket(
    brokerd: Daemon,
) -> None:
    home = brokerd.home
    # Something waits for the owner: a stranger must not be able to settle it.
    command = args(command="touch stranger-ran", cwd=f"{home}/workspace")
    outcome = call(brokerd, "curve-1", "c1", "shell", command)
    assert isinstance(outcome, Pending)
    before = snapshot(home)
    public, secret = zmq.curve_keypair()
    strangers = [
        RawClient(home, "admin", keys=False),  # no CURVE at all
        RawClient(home, "admin", keys=curve.KeyPair(public, secret)),  # a key nobody allowed
        # brokerd's own key pair is not an allowed client either.
        RawClient(home, "admin", keys=curve.load_pair(home / "keys", "brokerd")),
    ]
    try:
        for n, stranger in enumerate(strangers):
            verdict = VerdictRequest(f"v{n}", outcome.approval, True, Scope.SESSION, "a stranger")
            for message in (PendingQuery(f"q{n}"), verdict):
                with contextlib.suppress(zmq.Again):  # refused so fast it has no peer to send to
                    stranger.send(wire.encode(message))
        time.sleep(1.0)  # an answer would take a millisecond
        for stranger in strangers:
            assert stranger.recv(0) is None
    finally:
        for stranger in strangers:
            stranger.close()
    assert snapshot(home) == before
    listed = brokerd.ask(PendingQuery("q"), socket="admin")
    assert isinstance(listed, PendingList)
    assert outcome.approval in [a.approval for a in listed.approvals]
    assert not (home / "workspace" / "stranger-ran").exists()
    # gatewayd's key is on the allow-list.
    with RawClient(home, "admin", keys=curve.load_pair(home / "keys", "gatewayd")) as gatewayd:
        answer = wire.decode(gatewayd.ask(wire.encode(PendingQuery("g1"))))
        assert isinstance(answer, PendingList)


def test_state_query_is_served_on_both_sockets(brokerd: Daemon) -> None:
    for socket in SOCKETS:
        answer = brokerd.ask(StateQuery("s1", "fine-session"), socket=socket)
        assert answer.id == "s1" and answer.TYPE == "state"
    assert ledger_lines(brokerd.home)  # brokerd is still recording
