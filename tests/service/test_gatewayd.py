"""gatewayd over its real `gateway` socket, with real brokerd, memoryd and loopd and a fake model
(SPEC §3.6, §7, §9, §10.4, §12, I6, I7).

Owner messages are relayed and their turns stream through long polls; pending approvals show
in `events` and are settled through the verdict relay; only the owner's key gets an answer; a
restarted gatewayd re-reads what it missed; the witness follows the ledger and never goes back.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import zmq

from bxcore import curve
from bxcore.deny import DenyReason
from bxcore.home import witness
from bxcore.home.layout import Home
from bxcore.wire import codec as wire
from bxcore.wire.messages import (
    Accepted,
    ApprovalInfo,
    ApprovalState,
    AskWhy,
    AssistantText,
    Error,
    ErrorCode,
    Events,
    EventsQuery,
    LedgerHead,
    OwnerMessage,
    OwnerSaid,
    PendingList,
    PendingQuery,
    Ping,
    Pong,
    Scope,
    SessionsQuery,
    Settled,
    ToolCalled,
    ToolDenied,
    ToolDone,
    ToolPending,
    TurnEnd,
    VerdictRequest,
)
from tests.fakes.model_server import Answer
from tests.support.brokerd import RawClient, args, ledger_lines
from tests.support.daemons import running
from tests.support.ledger_file import GrowingLedger
from tests.support.owner import Box, run_bxctl, running_box, wait_until


@pytest.fixture(scope="module")
def box() -> Iterator[Box]:
    with running_box() as box:
        yield box


def pending_of(box: Box, session: str, timeout: float = 15.0) -> ApprovalInfo:
    """The first approval pending for `session`, as `events_query` shows it."""

    def found() -> ApprovalInfo | None:
        answer = box.ask(EventsQuery("p", session, 0, 1000))
        assert isinstance(answer, Events), answer
        return answer.pending[0] if answer.pending else None

    info: ApprovalInfo = wait_until(found, timeout, f"an approval pending in {session}")
    return info


def shell_call(box: Box, command: str) -> Answer:
    workspace = str(box.home / "workspace")
    return box.model.calls(("shell", args(command=command, cwd=workspace)))


def ledger_head(home: Path) -> dict[str, Any]:
    """The witness gatewayd should keep of the ledger as it is: its head, and where it ends."""
    last = ledger_lines(home)[-1]
    size = Home(home).ledger.stat().st_size
    return {"seq": json.loads(last)["seq"], "hash": hashlib.sha256(last).hexdigest(), "size": size}


def records_of_kind(home: Path, kind: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in ledger_lines(home) if json.loads(line)["kind"] == kind]


def witness_of(home: Path) -> Any:
    path = Home(home).witness("gatewayd")
    return json.loads(path.read_text()) if path.exists() else None


def test_an_owner_message_is_accepted_and_its_turn_streams_through_long_polls(box: Box) -> None:
    notes = box.home / "workspace" / "a.md"
    notes.write_text("hello from a file")
    box.model.script(
        "read a.md",
        box.model.calls(("read_file", args(path=str(notes)))),
        box.model.calls(("memory", args(action="note", file="n.md", text="x"))),
        Answer(text="All done."),
    )
    started = time.monotonic()
    quiet = box.ask(EventsQuery("q1", "stream", 0, 300))
    assert quiet == Events("q1", "stream", (), ())
    assert 0.25 <= time.monotonic() - started < 5, "a quiet long poll waits out wait_ms"

    assert box.ask(OwnerMessage("m1", "stream", "read a.md")) == Accepted("m1", "stream", 1, 1)
    events = box.turn("stream", 1)
    kinds = [type(e.event) for e in events]
    read, note, end = [ToolCalled, ToolDone], [ToolCalled, ToolDenied], [AssistantText, TurnEnd]
    assert kinds == [OwnerSaid, *read, *note, *end]
    assert [e.seq for e in events] == list(range(1, 8))
    text = "hello from a file"
    assert events[2].event == ToolDone("read_file", True, len(text), text)
    assert events[4].event == ToolDenied("memory", DenyReason.INVALID_ARGUMENTS)  # the reason only

    replay = box.ask(EventsQuery("r1", "stream", 3, 0))
    assert replay == Events("r1", "stream", tuple(events[3:]), ())

    box.model.script("say hi", Answer(text="hi"))
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(box.ask, EventsQuery("w1", "stream", 7, 20_000), 30.0)
        time.sleep(0.2)  # let the poll park (it is right either way; this tests the wake-up)
        sent = time.monotonic()
        box.ask(OwnerMessage("m2", "stream", "say hi"))
        woken = waiting.result(timeout=25)
    assert time.monotonic() - sent < 3, "a long poll answers as soon as there is something new"
    assert woken.events[0].seq == 8 and woken.events[0].event == OwnerSaid("say hi")
    box.turn("stream", 2, after=7)

    wait_until(lambda: witness_of(box.home) == ledger_head(box.home), what="the witness")


def test_a_repeated_owner_message_is_answered_once_and_runs_one_turn(box: Box) -> None:
    box.model.script("only once", Answer(text="once"))
    first = box.ask(OwnerMessage("same-id", "idem", "only once"))
    again = box.ask(OwnerMessage("same-id", "idem", "only once"))
    assert first == again == Accepted("same-id", "idem", 1, 1)
    box.turn("idem", 1)
    sessions = box.daemons["loopd"].ask(SessionsQuery("s1")).sessions
    assert [s.turns for s in sessions if s.session == "idem"] == [1]


def test_a_pending_approval_shows_in_events_and_is_approved_through_the_relay(box: Box) -> None:
    box.model.script("run echo", shell_call(box, "echo hi"), Answer(text="ran it"))
    box.ask(OwnerMessage("m1", "approve", "run echo"))
    info = pending_of(box, "approve")
    assert (info.session, info.tool, info.grant) == ("approve", "shell", "workspace-shell")
    assert info.why is AskWhy.GRANT_ASKS
    workspace = str(box.home / "workspace")
    assert json.loads(info.arguments) == {"command": "echo hi", "cwd": workspace}
    listed = box.ask(PendingQuery("p1"))
    assert isinstance(listed, PendingList) and info in listed.approvals

    verdict = VerdictRequest("v1", info.approval, True, Scope.ONCE, "the test's owner")
    settled = box.ask(verdict)
    assert settled == Settled("v1", info.approval, ApprovalState.APPROVED)
    events = box.turn("approve", 1)
    assert ToolPending("shell", info.approval) in [e.event for e in events]
    assert [e.event.ok for e in events if isinstance(e.event, ToolDone)] == [True]

    assert box.ask(verdict) == settled, "a client's retry gets the first answer"
    second = box.ask(VerdictRequest("v2", info.approval, False, Scope.ONCE, "the test's owner"))
    assert isinstance(second, Error) and second.code is ErrorCode.ALREADY_SETTLED
    assert box.ask(EventsQuery("e1", "approve", 0, 0)).pending == ()
    verdicts = [r for r in records_of_kind(box.home, "verdict") if r["approval"] == info.approval]
    assert [r["by"] for r in verdicts] == ["the test's owner via gatewayd"]


def test_a_sub_agents_pending_approval_shows_in_its_parents_events(box: Box) -> None:
    box.model.script(
        "ask a helper", box.model.calls(("spawn", args(task="helper: run date"))), Answer("ok")
    )
    box.model.script("helper: run date", shell_call(box, "date"), Answer(text="it ran"))
    box.ask(OwnerMessage("m1", "parent", "ask a helper"))
    info = pending_of(box, "parent")
    assert info.session == "sub-parent-1"
    box.ask(VerdictRequest("v1", info.approval, False, Scope.ONCE, "owner"))
    box.turn("parent", 1)
    child = box.model.requests_for("helper: run date")
    assert child[-1][-1]["content"] == "Denied: the owner refused this call."


def test_a_client_without_the_owners_key_gets_nothing(box: Box) -> None:
    keys = Home(box.home).keys
    strangers = [
        curve.KeyPair(*zmq.curve_keypair()),
        curve.load_pair(keys, "gatewayd"),
        curve.load_pair(keys, "brokerd"),
    ]
    for pair in strangers:
        with RawClient(box.home, "gateway", keys=pair) as raw:
            raw.send(wire.encode(PendingQuery("x1")))
            assert raw.recv(0.5) is None, f"{pair!r} was answered"
    with RawClient(box.home, "gateway", keys=False) as plain:
        plain.send(wire.encode(Ping("x2")))
        assert plain.recv(0.5) is None
    with RawClient(box.home, "gateway") as owner:
        assert isinstance(wire.decode(owner.ask(wire.encode(Ping("x3")))), Pong)


def test_garbage_frames_are_answered_bad_message_and_serving_continues(box: Box) -> None:
    with RawClient(box.home, "gateway") as raw:
        raw.send(b"\xff\xfe not json at all")
        raw.send([b"two", b"frames"])
        raw.send(b'{"type":"ledger_head","seq":1,"hash":"' + b"0" * 64 + b'"}')
        assert raw.recv(0.3) is None, "no id to answer to: dropped"
        for frame, why in [
            (b'{"type":"events_query","id":"g1","session":"s","after":-1,"wait_ms":0}', ""),
            (b'{"type":"events_query","id":"g1","session":"s","after":0,"wait_ms":60000}', ""),
            (b'{"type":"events_query","id":"g1","session":"../x","after":0,"wait_ms":0}', ""),
            (b'{"type":"ping","id":"g1","extra":true}', ""),
            (wire.encode(SessionsQuery("g1")), "does not take sessions_query"),
            (wire.encode(PendingList("g1", ())), "does not take pending_list"),
        ]:
            answer = wire.decode(raw.ask(frame))
            assert isinstance(answer, Error) and answer.id == "g1", frame
            assert answer.code is ErrorCode.BAD_MESSAGE and why in answer.message
        assert isinstance(wire.decode(raw.ask(wire.encode(Ping("g2")))), Pong)
    assert box.daemons["gatewayd"].process.poll() is None


def test_a_restarted_gatewayd_rereads_history_and_pending_approvals() -> None:
    with running_box(("brokerd", "memoryd", "loopd")) as box:
        box.model.script("run ls", shell_call(box, "ls"), Answer(text="listed"))
        with running("gatewayd", box.home) as first:
            box.ask(OwnerMessage("m1", "again", "run ls"))
            info = pending_of(box, "again")
            first.kill()
        with running("gatewayd", box.home):
            answer = box.ask(EventsQuery("e1", "again", 0, 0))
            assert isinstance(answer, Events)
            assert [type(e.event) for e in answer.events] == [OwnerSaid, ToolCalled, ToolPending]
            assert answer.pending == (info,)
            settled = box.ask(VerdictRequest("v1", info.approval, True, Scope.ONCE, "owner"))
            assert isinstance(settled, Settled)
            events = box.turn("again", 1, after=3)
            assert [type(e.event) for e in events] == [ToolDone, AssistantText, TurnEnd]


def test_the_witness_follows_ledger_heads_and_never_goes_back() -> None:
    with running_box(services=()) as box:
        home = box.home
        path = Home(home).witness("gatewayd")
        publisher: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.PUB)  # faked brokerd
        publisher.setsockopt(zmq.LINGER, 0)
        publisher.bind(Home(home).endpoint("broker-events"))
        try:
            with running("gatewayd", home) as gatewayd:
                publish_until(publisher, home, LedgerHead(5, "5" * 64))
                publisher.send(wire.encode(LedgerHead(3, "3" * 64)))  # older: refused
                wait_until(lambda: "SUSPICIOUS" in gatewayd.output(), 10, "the refusal")
                assert witness_of(home) == {"seq": 5, "hash": "5" * 64}
                witness.reset(path, witness.Seen(3, "3" * 64))  # the owner's decision
                publish_until(publisher, home, LedgerHead(4, "4" * 64))
                assert gatewayd.output().count("SUSPICIOUS") == 1
                assert "changed outside gatewayd" in gatewayd.output()
            with running("gatewayd", home) as restarted:  # it starts from the head it kept
                publish_until(publisher, home, LedgerHead(10, "a" * 64))
                publisher.send(wire.encode(LedgerHead(2, "2" * 64)))
                wait_until(lambda: "SUSPICIOUS" in restarted.output(), 10, "the refusal")
                assert witness_of(home) == {"seq": 10, "hash": "a" * 64}
        finally:
            publisher.close(linger=0)
        assert not list(Home(home).witness("gatewayd").parent.glob(".*tmp")), "no temp left"


def test_a_chain_cut_and_grown_past_the_witness_never_overwrites_it_and_verify_fails() -> None:
    """Issue 10 (4): the regrown chain's heads only grow, so the seq rule alone took them;
    the ledger no longer holds the witnessed record where it ended, so they are refused."""
    with running_box(services=()) as box:
        home = Home(box.home)
        ledger = GrowingLedger(home.ledger)
        publisher: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.PUB)  # faked brokerd
        publisher.setsockopt(zmq.LINGER, 0)
        publisher.bind(home.endpoint("broker-events"))
        try:
            with running("gatewayd", box.home) as gatewayd:
                five = ledger.grow(5)
                publish_until(publisher, box.home, five)
                ledger.cut(2)
                regrown = ledger.grow(6, version="regrown")
                while "SUSPICIOUS" not in gatewayd.output():
                    publisher.send(wire.encode(regrown))
                    wait_until_or_none(lambda: "SUSPICIOUS" in gatewayd.output(), 0.3)
                assert "no longer holds the record the witness kept" in gatewayd.output()
                assert witness_of(box.home) == {"seq": 5, "hash": five.hash, "size": five.size}
                verify = run_bxctl(box.home, "audit", "verify")
                assert (verify.returncode, verify.stdout) == (
                    1,
                    "bad: line 5: does not match the head seen (seq 5): tampered\n",
                )
                accepted = ledger.head()  # the owner takes the ledger as it is, on purpose
                witness.reset(
                    home.witness("gatewayd"), witness.Seen(8, accepted.hash, accepted.size)
                )
                publish_until(publisher, box.home, ledger.grow(1, version="regrown"))
                assert gatewayd.output().count("SUSPICIOUS") == 1
                assert run_bxctl(box.home, "audit", "verify").returncode == 0
        finally:
            publisher.close(linger=0)


def publish_until(publisher: zmq.Socket[bytes], home: Path, head: LedgerHead) -> None:
    """Publish `head` until the witness holds it (the subscription takes a moment to join)."""
    wanted: dict[str, object] = {"seq": head.seq, "hash": head.hash}
    if head.size is not None:
        wanted["size"] = head.size
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        publisher.send(wire.encode(head))
        if wait_until_or_none(lambda: witness_of(home) == wanted, 0.3):
            return
    raise TimeoutError(f"the witness never held {wanted}; it holds {witness_of(home)}")


def wait_until_or_none(check: Any, timeout: float) -> bool:
    try:
        wait_until(check, timeout)
    except TimeoutError:
        return False
    return True
