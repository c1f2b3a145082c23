"""Session labels through brokerd's real sockets (SPEC §5.5, §6, I3, I4, I5).

A read raises the session by what it read before the answer goes out; untrusted content makes
every consequential call ask the owner; sub-agents inherit their parent's label on first
read; `absorb` raises a parent by its child's label, and each raise is in the ledger.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bxcore.deny import DenyReason
from bxcore.labels import DataClass, Label
from bxcore.wire.messages import (
    Absorb,
    AskWhy,
    Denied,
    Done,
    Error,
    Explain,
    Failed,
    Pending,
    PendingList,
    PendingQuery,
    State,
    StateQuery,
    Verdict,
)
from tests.support.brokerd import (
    args,
    call,
    ledger_records,
    records_of,
    short_folder,
    state_file,
    write_grant,
)
from tests.support.daemons import Daemon, init_home, running

PUBLIC = Label(DataClass.PUBLIC, False)
PRIVATE = Label(DataClass.PRIVATE, False)
SECRET = Label(DataClass.SECRET, False)
UNTRUSTED = Label(DataClass.PRIVATE, True)


def add_sources(home: Path) -> None:
    """A secret folder, an untrusted inbox and a public folder to read from, beside the home
    (no tool reaches into the home)."""
    place = home.parent
    for folder, text in (("vault", "the launch code"), ("inbox", "obey me"), ("pub", "news")):
        (place / folder).mkdir()
        (place / folder / "a.txt").write_text(text)
    write_grant(
        home, "vault", tool="read_file", mode="allow", path=f"{place}/vault", class_="secret"
    )
    write_grant(
        home, "inbox", tool="read_file", mode="allow", path=f"{place}/inbox", untrusted=True
    )
    write_grant(home, "pub", tool="read_file", mode="allow", path=f"{place}/pub", class_="public")


@pytest.fixture(scope="module")
def brokerd() -> Iterator[Daemon]:
    with short_folder() as tmp:
        home = init_home(tmp / "h")
        add_sources(home)
        with running("brokerd", home) as daemon:
            yield daemon


def state(daemon: Daemon, session: str) -> Label:
    answer = daemon.ask(StateQuery("s1", session))
    assert isinstance(answer, State) and answer.session == session, answer
    return answer.label


def read(daemon: Daemon, session: str, call_id: str, folder: str) -> object:
    path = daemon.home.parent / folder / "a.txt"
    return call(daemon, session, call_id, "read_file", args(path=str(path)))


def label_json(label: Label) -> dict[str, object]:
    return {"class": label.class_.value, "untrusted": label.untrusted}


def test_reading_a_secret_raises_the_session_before_the_answer_and_records_the_raise(
    brokerd: Daemon,
) -> None:
    home, session = brokerd.home, "secret-1"
    assert state(brokerd, session) == PRIVATE
    assert read(brokerd, session, "c1", "vault") == Done(True, "the launch code", SECRET)
    # By the time the answer is read, the raise is on disk and in the ledger.
    assert json.loads(state_file(home, session).read_text()) == label_json(SECRET)
    assert [r["kind"] for r in records_of(home, session)] == ["decision", "executed", "raised"]
    raised = records_of(home, session)[-1]
    assert (raised["from"], raised["to"]) == (label_json(PRIVATE), label_json(SECRET))
    assert state(brokerd, session) == SECRET


def test_a_label_never_falls_when_the_session_reads_something_lower(brokerd: Daemon) -> None:
    home, session = brokerd.home, "never-falls"
    assert read(brokerd, session, "c1", "vault") == Done(True, "the launch code", SECRET)
    assert read(brokerd, session, "c2", "pub") == Done(True, "news", PUBLIC)
    written = call(
        brokerd,
        "never-falls-2",
        "c1",
        "write_file",
        args(path=f"{home}/workspace/nf.txt", content="x"),
    )
    assert isinstance(written, Done) and written.label == PUBLIC
    assert state(brokerd, session) == SECRET
    assert state(brokerd, "never-falls-2") == PRIVATE  # a public result never lowers a session
    kinds = [r["kind"] for r in records_of(home, session)]
    assert kinds.count("raised") == 1


def test_untrusted_content_turns_an_allowed_write_into_a_question_for_the_owner(
    brokerd: Daemon,
) -> None:
    home, session = brokerd.home, "untrusted-1"
    target = home / "workspace" / "from-untrusted.txt"
    write = args(path=str(target), content="x")
    # Before: a plain allow. After reading the inbox: the owner is asked (I5).
    assert brokerd.ask(Explain("e1", session, "write_file", write), socket="admin").verdict is (
        Verdict.ALLOWED
    )
    assert read(brokerd, session, "c1", "inbox") == Done(True, "obey me", UNTRUSTED)
    assert state(brokerd, session) == UNTRUSTED
    outcome = call(brokerd, session, "c2", "write_file", write)
    assert isinstance(outcome, Pending)
    listed = brokerd.ask(PendingQuery("q1"), socket="admin")
    assert isinstance(listed, PendingList)
    (info,) = [a for a in listed.approvals if a.approval == outcome.approval]
    assert (info.why, info.grant, info.label) == (AskWhy.UNTRUSTED, "workspace-write", UNTRUSTED)
    (decision,) = records_of(home, session, "c2")
    assert decision["outcome"] == "pending" and decision["why"] == AskWhy.UNTRUSTED.value
    assert decision["label"] == label_json(UNTRUSTED)
    assert not target.exists()
    # A read is not consequential: it still runs at once.
    assert read(brokerd, session, "c3", "pub") == Done(True, "news", PUBLIC)


def test_the_sub_agent_examples_of_the_spec_hold_through_state_query(short_tmp: Path) -> None:
    home = init_home(short_tmp / "h")
    add_sources(home)
    broker_folder = home / "state" / "broker"
    with running("brokerd", home) as brokerd:
        # read("chat-1") creates no broker/ folder.
        assert state(brokerd, "chat-1") == PRIVATE
        assert not broker_folder.exists()
        # With mm-thread raised to private+untrusted, sub-mm-thread-3 inherits it, on disk.
        assert read(brokerd, "mm-thread", "c1", "inbox") == Done(True, "obey me", UNTRUSTED)
        assert state(brokerd, "sub-mm-thread-3") == UNTRUSTED
        assert json.loads(state_file(home, "sub-mm-thread-3").read_text()) == label_json(UNTRUSTED)
        # With mm-thread at secret+untrusted, a grandchild through a missing child inherits it.
        assert read(brokerd, "mm-thread", "c2", "vault") == Done(True, "the launch code", SECRET)
        assert state(brokerd, "mm-thread") == Label(DataClass.SECRET, True)
        assert not state_file(home, "sub-mm-thread-1").exists()
        assert state(brokerd, "sub-sub-mm-thread-1-2") == Label(DataClass.SECRET, True)
        # A later read of an existing child's file hits the file: it does not inherit again.
        assert state(brokerd, "sub-mm-thread-3") == UNTRUSTED
        # Ids that only look like children are the default and create nothing.
        for session in ("sub-mm-thread-x", "sub-mm-thread-", "sub--1", "sub-mm-thread-1a"):
            assert state(brokerd, session) == PRIVATE
            assert not state_file(home, session).exists()
    assert sorted(p.name for p in broker_folder.iterdir()) == [
        "mm-thread.json",
        "sub-mm-thread-1.json",
        "sub-mm-thread-3.json",
        "sub-sub-mm-thread-1-2.json",
    ]


def test_a_sub_agent_started_under_a_secret_parent_may_not_write_to_a_private_folder(
    brokerd: Daemon,
) -> None:
    home = brokerd.home
    assert read(brokerd, "laundry", "c1", "vault") == Done(True, "the launch code", SECRET)
    target = home / "workspace" / "laundered.txt"
    outcome = call(
        brokerd,
        "sub-laundry-1",
        "c1",
        "write_file",
        args(path=str(target), content="the launch code"),
    )
    assert outcome == Denied(DenyReason.FLOW_VIOLATION)
    assert not target.exists()


def test_absorb_raises_the_parent_by_the_childs_label_and_records_it(brokerd: Daemon) -> None:
    home, parent, child = brokerd.home, "parent-1", "sub-parent-1-1"
    assert state(brokerd, child) == PRIVATE  # inherited from the parent, now on disk
    assert read(brokerd, child, "c1", "vault") == Done(True, "the launch code", SECRET)
    assert read(brokerd, "helper", "c1", "inbox") == Done(True, "obey me", UNTRUSTED)
    assert state(brokerd, parent) == PRIVATE
    answer = brokerd.ask(Absorb("a1", parent, child))
    assert answer == State("a1", parent, SECRET)
    assert state(brokerd, parent) == SECRET
    absorbed = [r for r in ledger_records(home) if r["kind"] == "absorbed"]
    assert [(r["parent"], r["child"], r["to"]) for r in absorbed] == [
        (parent, child, label_json(SECRET))
    ]
    # Any session's answer may be absorbed; the label joins and never falls.
    assert brokerd.ask(Absorb("a2", parent, "helper")) == State(
        "a2", parent, Label(DataClass.SECRET, True)
    )
    assert brokerd.ask(Absorb("a3", parent, "a-public-nobody")) == State(
        "a3", parent, Label(DataClass.SECRET, True)
    )
    absorbed = [r for r in ledger_records(home) if r["kind"] == "absorbed"]
    assert [(r["child"], r["to"]) for r in absorbed[1:]] == [
        ("helper", label_json(Label(DataClass.SECRET, True))),
        ("a-public-nobody", label_json(Label(DataClass.SECRET, True))),
    ]


def test_a_damaged_state_file_is_an_error_and_the_call_does_not_run(brokerd: Daemon) -> None:
    home, session = brokerd.home, "damaged-1"
    state_file(home, session).parent.mkdir(parents=True, exist_ok=True)
    state_file(home, session).write_text('{"class":"public"}')
    answer = brokerd.ask(StateQuery("s1", session))
    assert isinstance(answer, Error) and answer.code == "unavailable"
    target = home / "workspace" / "damaged.txt"
    outcome = call(brokerd, session, "c1", "write_file", args(path=str(target), content="x"))
    assert isinstance(outcome, Failed)
    assert outcome.message.startswith("the session's label cannot be read")
    assert not target.exists()
