"""memoryd as a real process, driven over its memory socket (SPEC §11, §2.3, §3.1, I7, I8).

brokerd's `state_query` answer comes from `FakeBrokerState` (tests/support/peers.py), bound on
the broker endpoint of the same home, so each test sets the label a note will be stored with.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from bxcore.home.layout import Home
from bxcore.labels import CLEAN, DataClass, Label
from bxcore.router import tune
from bxcore.wire import codec as wire
from bxcore.wire.messages import (
    Done,
    Error,
    ErrorCode,
    Failed,
    Ping,
    Pong,
    StateQuery,
    ToolRequest,
    ToolResponse,
)
from tests.support.brokerd import ledger_records
from tests.support.daemons import init_home, running
from tests.support.peers import FakeBrokerState

PRIVATE = Label(DataClass.PRIVATE, False)
SECRET = Label(DataClass.SECRET, False)
SECRET_UNTRUSTED = Label(DataClass.SECRET, True)
PUBLIC_UNTRUSTED = Label(DataClass.PUBLIC, True)

READY_S = 15.0
STOP_S = 5.0


# --- the process ------------------------------------------------------------------------------


class Memoryd:
    """One memoryd process on `home`; its standard error goes to `log`."""

    def __init__(self, home: Path, log: Path) -> None:
        self.home = home
        self.log = log
        with open(log, "ab") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "services.memoryd", "--home", str(home)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env={k: v for k, v in os.environ.items() if k != "BX_HOME"},
            )

    def __repr__(self) -> str:
        return f"<Memoryd pid {self.process.pid} rc {self.process.poll()}>"

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> int:
        """SIGTERM, then SIGKILL if it has not exited in `STOP_S`; returns the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


class Peer:
    """A DEALER on the memory socket: one frame out, answers matched by id."""

    def __init__(self, ctx: zmq.Context[Any], endpoint: str) -> None:
        self.socket = ctx.socket(zmq.DEALER)
        tune(self.socket)
        self.socket.connect(endpoint)
        self.early: dict[str, Any] = {}  # answers that came before the one waited for

    def send_frames(self, *frames: bytes) -> None:
        self.socket.send_multipart(list(frames))

    def send(self, message: Any) -> None:
        self.socket.send(wire.encode(message))

    def receive(self, timeout: float) -> Any | None:
        if not self.socket.poll(int(timeout * 1000)):
            return None
        return wire.decode(self.socket.recv())

    def answer_to(self, request_id: str, timeout: float = 10.0) -> Any:
        """The answer to `request_id`, in whatever order answers come: one that comes first
        for another request is kept for it."""
        if request_id in self.early:
            return self.early.pop(request_id)
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            answer = self.receive(left)
            answer_id = getattr(answer, "id", None)
            if answer_id == request_id:
                return answer
            if answer_id is not None:
                self.early[answer_id] = answer
        raise TimeoutError(f"no answer to {request_id}")

    def ask(self, message: Any, timeout: float = 10.0) -> Any:
        self.send(message)
        return self.answer_to(message.id, timeout)


def wait_ready(daemon: Memoryd, peer: Peer) -> Pong:
    """Ping until memoryd answers, the process exits, or `READY_S` passes."""
    deadline = time.monotonic() + READY_S
    attempt = 0
    while time.monotonic() < deadline:
        if daemon.process.poll() is not None:
            raise AssertionError(f"memoryd exited {daemon.process.returncode}: {daemon.stderr()}")
        attempt += 1
        peer.send(Ping(f"ready-{attempt}"))
        answer = peer.receive(0.1)
        while answer is not None and not isinstance(answer, Pong):
            answer = peer.receive(0.1)
        if isinstance(answer, Pong):
            return answer
    raise AssertionError(f"memoryd gave no pong in {READY_S} s: {daemon.stderr()}")


@pytest.fixture
def home(short_tmp: Path) -> Path:
    root = short_tmp / "home"
    Home(root).ensure_run()
    return root


@pytest.fixture
def ctx() -> Iterator[zmq.Context[Any]]:
    context: zmq.Context[Any] = zmq.Context()
    try:
        yield context
    finally:
        context.destroy(linger=0)


@pytest.fixture
def broker(home: Path) -> Iterator[FakeBrokerState]:
    with FakeBrokerState(Home(home).endpoint("broker"), PRIVATE) as fake:
        yield fake


@pytest.fixture
def daemons(short_tmp: Path) -> Iterator[list[Memoryd]]:
    """Every memoryd a test starts; each is stopped (TERM, then KILL) however the test ends."""
    started: list[Memoryd] = []
    try:
        yield started
    finally:
        for daemon in started:
            daemon.stop()


def start(daemons: list[Memoryd], home: Path) -> Memoryd:
    daemon = Memoryd(home, home.parent / f"memoryd-{len(daemons)}.log")
    daemons.append(daemon)
    return daemon


@pytest.fixture
def memoryd(daemons: list[Memoryd], home: Path, peer: Peer) -> Memoryd:
    daemon = start(daemons, home)
    wait_ready(daemon, peer)
    return daemon


@pytest.fixture
def peer(ctx: zmq.Context[Any], home: Path) -> Peer:
    return Peer(ctx, Home(home).endpoint("memory"))


_ids = iter(range(1, 10**9))


def call(arguments: str, call_id: str | None = None, session: str = "chat-1") -> ToolRequest:
    n = next(_ids)
    return ToolRequest(f"r{n}", session, call_id or f"call_{n}", "memory", arguments)


def outcome(peer: Peer, request: ToolRequest, timeout: float = 10.0) -> Any:
    answer = peer.ask(request, timeout)
    assert isinstance(answer, ToolResponse), answer
    return answer.outcome


def note(peer: Peer, text: str, session: str = "chat-1") -> Any:
    return outcome(peer, call(wire.dump_json({"action": "note", "text": text}), session=session))


def recall(peer: Peer, query: str) -> Any:
    return outcome(peer, call(wire.dump_json({"action": "recall", "query": query})))


# --- the tests --------------------------------------------------------------------------------


def test_memoryd_answers_ping_with_its_name(memoryd: Memoryd, peer: Peer) -> None:
    pong = peer.ask(Ping("p1"))
    assert isinstance(pong, Pong)
    assert (pong.service, pong.pid) == ("memoryd", memoryd.process.pid)


def test_a_note_is_recalled_with_the_label_brokerd_gave_when_it_was_noted(
    memoryd: Memoryd, peer: Peer, broker: FakeBrokerState
) -> None:
    broker.label = PUBLIC_UNTRUSTED
    assert note(peer, "the meeting is on Tuesday") == Done(True, "noted #1", CLEAN)
    assert [q.session for q in broker.queries] == ["chat-1"]
    broker.label = SECRET  # later changes do not touch the note
    assert recall(peer, "meeting") == Done(True, "#1 the meeting is on Tuesday", PUBLIC_UNTRUSTED)


def test_every_recall_carries_the_label_of_every_note_it_searched(
    memoryd: Memoryd, peer: Peer, broker: FakeBrokerState
) -> None:
    assert recall(peer, "safe") == Done(True, "no notes match", CLEAN)  # nothing to search
    broker.labels["vault"] = SECRET_UNTRUSTED
    note(peer, "the safe code is 1234", session="vault")
    note(peer, "the safe is behind the painting", session="chat-1")
    assert recall(peer, "safe").label == SECRET_UNTRUSTED
    assert recall(peer, "painting").label == SECRET_UNTRUSTED  # the secret note was searched
    assert recall(peer, "nothing-like-it") == Done(True, "no notes match", SECRET_UNTRUSTED)


def test_forget_deletes_one_note_and_a_missing_one_is_not_ok(
    memoryd: Memoryd, peer: Peer, broker: FakeBrokerState
) -> None:
    note(peer, "temporary")
    forget = '{"action":"forget","id":1}'
    assert outcome(peer, call(forget)) == Done(True, "forgot #1", CLEAN)
    assert outcome(peer, call(forget)) == Done(False, "no note #1", CLEAN)
    assert recall(peer, "") == Done(True, "no notes match", CLEAN)


def test_a_retried_note_of_the_same_session_and_call_is_kept_once(
    memoryd: Memoryd, peer: Peer, broker: FakeBrokerState
) -> None:
    arguments = '{"action":"note","text":"only once"}'
    first = outcome(peer, call(arguments, "call_same"))
    assert outcome(peer, call(arguments, "call_same")) == first == Done(True, "noted #1", CLEAN)
    assert recall(peer, "") == Done(True, "#1 only once", PRIVATE)


def test_a_retry_that_arrives_while_the_first_is_in_flight_is_kept_once(
    memoryd: Memoryd, peer: Peer, broker: FakeBrokerState
) -> None:
    broker.delay_s = 0.3  # both requests wait on brokerd's answer at the same time
    arguments = '{"action":"note","text":"raced"}'
    first, second = call(arguments, "call_race"), call(arguments, "call_race")
    peer.send(first)
    peer.send(second)
    answers = [peer.answer_to(first.id), peer.answer_to(second.id)]
    assert [a.outcome for a in answers] == [Done(True, "noted #1", CLEAN)] * 2
    broker.delay_s = 0.0
    assert recall(peer, "") == Done(True, "#1 raced", PRIVATE)


def test_when_brokerd_does_not_answer_the_note_fails_and_nothing_is_stored(
    memoryd: Memoryd, peer: Peer, broker: FakeBrokerState
) -> None:
    broker.answering = False
    failed = outcome(peer, call('{"action":"note","text":"lost"}', "call_lost"))
    assert isinstance(failed, Failed)
    assert failed.message.startswith("cannot learn the session's label from brokerd: ")
    assert "brokerd did not answer" in failed.message
    assert len(broker.queries) >= 1
    broker.answering = True
    assert recall(peer, "") == Done(True, "no notes match", CLEAN)
    again = outcome(peer, call('{"action":"note","text":"lost"}', "call_lost"))
    assert again == Done(True, "noted #1", CLEAN)  # nothing was remembered for the failure


def test_arguments_that_are_not_canonical_memory_arguments_fail(
    memoryd: Memoryd, peer: Peer, broker: FakeBrokerState
) -> None:
    failed = outcome(peer, call('{"action":"note","file":"notes.md","text":"x"}'))
    assert isinstance(failed, Failed)
    assert failed.message.startswith("memory: the arguments do not parse: ")
    assert broker.queries == []


def test_garbage_frames_get_a_clear_error_when_an_id_can_be_read_and_memoryd_serves_on(
    memoryd: Memoryd, peer: Peer, broker: FakeBrokerState
) -> None:
    peer.send_frames(b"\xff\xfe not utf-8")
    peer.send_frames(b"")
    peer.send_frames(b"[1,2,3]")
    peer.send_frames(b'{"type":"ping","id":"a"}', b"a second frame")
    peer.send_frames(b"x" * 100_000)
    peer.send_frames(b'{"type":"tool_request","id":"g1"}')
    peer.send_frames(b'{"type":"no_such_type","id":"g2"}')
    peer.send_frames(b'{"type":"ping","id":"g3","extra":1}')
    for request_id in ("g1", "g2", "g3"):
        error = peer.answer_to(request_id)
        assert isinstance(error, Error)
        assert error.code is ErrorCode.BAD_MESSAGE
        assert error.message and "\n" not in error.message
    assert peer.receive(0.2) is None  # nothing answered the frames without an id
    assert note(peer, "still here") == Done(True, "noted #1", CLEAN)


def test_a_frame_over_the_size_limit_is_dropped_and_memoryd_serves_the_next_client(
    memoryd: Memoryd, ctx: zmq.Context[Any], home: Path, broker: FakeBrokerState
) -> None:
    flooder = Peer(ctx, Home(home).endpoint("memory"))
    flooder.send_frames(b'{"type":"ping","id":"big","x":"' + b"x" * (wire.MAX_MESSAGE + 1) + b'"}')
    assert flooder.receive(0.3) is None
    assert note(Peer(ctx, Home(home).endpoint("memory")), "after the flood") == Done(
        True, "noted #1", CLEAN
    )


@pytest.mark.parametrize(
    "message",
    [
        StateQuery("w1", "chat-1"),
        ToolRequest("w1", "chat-1", "c1", "read_file", '{"path":"/etc/passwd"}'),
        Pong("w1", "brokerd", 1, "0", "now"),
    ],
)
def test_a_message_of_another_type_is_a_bad_message_and_memoryd_serves_on(
    memoryd: Memoryd, peer: Peer, broker: FakeBrokerState, message: Any
) -> None:
    assert peer.ask(message) == Error(
        "w1", ErrorCode.BAD_MESSAGE, "memoryd takes only memory tool_request and notes_query"
    )
    assert recall(peer, "") == Done(True, "no notes match", CLEAN)


def test_notes_and_remembered_answers_survive_a_restart(
    daemons: list[Memoryd], home: Path, peer: Peer, broker: FakeBrokerState
) -> None:
    first = start(daemons, home)
    wait_ready(first, peer)
    arguments = '{"action":"note","text":"durable"}'
    assert outcome(peer, call(arguments, "call_d")) == Done(True, "noted #1", CLEAN)
    assert first.stop() == 0
    second = start(daemons, home)
    wait_ready(second, peer)
    assert outcome(peer, call(arguments, "call_d")) == Done(True, "noted #1", CLEAN)
    assert recall(peer, "durable") == Done(True, "#1 durable", PRIVATE)


def test_sigterm_stops_memoryd_cleanly(memoryd: Memoryd) -> None:
    assert memoryd.stop() == 0
    assert "stopping on SIGTERM" in memoryd.stderr()
    assert "Traceback" not in memoryd.stderr()


def test_a_second_memoryd_on_the_same_home_refuses_with_one_line(
    memoryd: Memoryd, daemons: list[Memoryd], home: Path, peer: Peer
) -> None:
    second = start(daemons, home)
    assert second.process.wait(READY_S) == 1
    lines = second.stderr().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("memoryd: memoryd is already running for this home")
    assert isinstance(peer.ask(Ping("still")), Pong)  # the first one still serves


def test_a_store_that_cannot_be_opened_stops_memoryd_with_status_1(
    daemons: list[Memoryd], home: Path
) -> None:
    (home / "memory").write_text("a file where the folder should be")
    daemon = start(daemons, home)
    assert daemon.process.wait(READY_S) == 1
    assert f"{home / 'memory'} is not a folder" in daemon.stderr()


def test_a_store_that_cannot_be_opened_stops_memoryd_with_one_line(
    daemons: list[Memoryd], home: Path
) -> None:
    (home / "memory").write_text("a file where the folder should be")
    daemon = start(daemons, home)
    assert daemon.process.wait(READY_S) == 1
    lines = [line for line in daemon.stderr().splitlines() if line.startswith("memoryd: ")]
    assert lines == [f"memoryd: cannot open the memory store {Home(home).memory_db}: "
                     f"{home / 'memory'} is not a folder"]  # fmt: skip
    assert "Traceback" not in daemon.stderr()


# --- through the real box: brokerd raises the session by what a recall searched ---------------


def test_a_private_session_that_recalls_a_word_matching_nothing_becomes_secret(
    short_tmp: Path,
) -> None:
    """Issue 9 (8): "no notes match" is one bit about every note, so a private session that
    asks while a secret note exists is raised to secret, even though nothing came back."""
    home = init_home(short_tmp / "box")
    state = Home(home).state_broker
    state.mkdir(parents=True)
    (state / "vault.json").write_text('{"class": "secret", "untrusted": false}')
    with running("brokerd", home) as brokerd, running("memoryd", home):
        noted = brokerd.ask(
            ToolRequest("r1", "vault", "c1", "memory", '{"action":"note","text":"PIN 4711"}')
        )
        assert noted == ToolResponse("r1", Done(True, "noted #1", CLEAN)), noted
        assert brokerd.ask(StateQuery("q1", "chat-1")).label == PRIVATE
        recalled = brokerd.ask(
            ToolRequest("r2", "chat-1", "c2", "memory", '{"action":"recall","query":"4712"}')
        )
        assert recalled == ToolResponse("r2", Done(True, "no notes match", SECRET)), recalled
        assert brokerd.ask(StateQuery("q2", "chat-1")).label == SECRET
    raised = [r for r in ledger_records(home) if r["kind"] == "raised" and r["session"] == "chat-1"]
    assert [(r["from"], r["to"]) for r in raised] == [
        ({"class": "private", "untrusted": False}, {"class": "secret", "untrusted": False})
    ]
