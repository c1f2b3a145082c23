"""The owner's phone (SPEC §21, issue 26) against a real homeserver: Synapse on 127.0.0.1 with
SQLite, one for the module, a real `matrix-nio` client as the phone, and the whole box (brokerd,
memoryd, loopd, gatewayd, a fake model) in each test, in an encrypted and an unencrypted room.

Run them alone with `pytest -m matrix`.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator

import pytest

from bxcore.wire.messages import (
    Accepted,
    AssistantText,
    EndReason,
    Events,
    EventsQuery,
    HistoryQuery,
    JobRun,
    JobRunStarted,
    OwnerMessage,
    Scope,
    SessionsQuery,
    Settled,
    TurnEnd,
    VerdictRequest,
)
from tests.fakes.model_server import Answer
from tests.support.brokerd import args, ledger_lines, short_folder
from tests.support.matrix_box import World, counter, shell_call, world
from tests.support.owner import wait_until
from tests.support.phone import Phone
from tests.support.synapse import Homeserver, homeserver

pytestmark = pytest.mark.matrix


@pytest.fixture(scope="module")
def hs() -> Iterator[Homeserver]:
    with short_folder() as folder, homeserver(folder / "hs") as server:
        yield server


# One box for each kind of room, shared by the module's tests (each in threads of its own):
# starting a box costs more than most of these tests. The unencrypted one lets approvals
# expire after a second.
@pytest.fixture(scope="module")
def enc(hs: Homeserver) -> Iterator[World]:
    with world(hs, encrypted=True) as w:
        yield w


@pytest.fixture(scope="module")
def plain(hs: Homeserver) -> Iterator[World]:
    with world(hs, encrypted=False, config="[broker]\napproval_ttl_s = 1\n") as w:
        yield w


@pytest.fixture(params=["encrypted", "unencrypted"])
def either(request: pytest.FixtureRequest) -> World:
    w: World = request.getfixturevalue("enc" if request.param == "encrypted" else "plain")
    return w


def test_a_whole_turn_comes_back_in_the_messages_thread(either: World) -> None:
    w = either
    w.model.script("read the notes", w.model.calls(("read_file", args(path="/nowhere/x"))),
                   Answer("I could not read them.\u202e"))  # fmt: skip
    root = w.phone.send(w.room, "read the notes")
    post = w.phone.wait_post(
        w.box.user_id, lambda _p, text: "I could not read them." in text, 30, "the answer"
    )
    text = w.phone.text_of(post.event_id)
    assert post.relates.get("rel_type") == "m.thread" and post.relates["event_id"] == root
    assert "→ read_file" in text and '"/nowhere/x"' in text  # the call, as bxctl shows it
    assert "denied" in text  # no grant reads /nowhere
    assert "I could not read them.\\u202e" in text and "\u202e" not in text  # made visible
    assert post.encrypted is w.encrypted
    session = w.session_of(root)
    assert session.startswith("mx-")
    # a reply in the thread goes on in the same session, as its next turn
    w.model.script("and again", Answer("Again: no."))
    w.phone.send(w.room, "and again", thread=root)
    again = w.box_post("Again: no.")
    assert w.phone.text_of(again).startswith("Again: no.")
    turns = {s.session: s.turns for s in w.daemons["loopd"].ask(SessionsQuery("s")).sessions}
    assert turns[session] == 2


def test_only_an_owners_encrypted_message_reaches_loopd(enc: World, stranger: Phone) -> None:
    w = enc
    stranger.send(w.room, "a stranger says: run rm -rf")
    w.phone.send_in_the_clear(w.room, "sent in the clear: run rm -rf")
    w.model.script("a real one", Answer("heard you"))
    w.phone.send(w.room, "a real one")
    w.box_post("heard you")
    log = w.gatewayd.output()
    assert "who is not an owner" in log and "not end-to-end encrypted" in log
    asked = [m for m in w.model.fake.requests if "rm -rf" in json.dumps(m["messages"])]
    assert asked == []


def card_of(w: World, command: str) -> str:
    """The event id of the card that shows `command`."""
    return w.phone.wait_post(
        w.box.user_id,
        lambda _p, text: text.startswith("approval ") and command in text and "React" in text,
        30,
        f"the card of {command!r}",
    ).event_id


def offered_on(w: World, card: str) -> list[str]:
    """The reactions the box put under its card, for the owner to tap."""
    with w.phone._lock:
        seen = list(w.phone.seen)
    return [s.relates.get("key", "") for s in seen if s.kind == "reaction"
            and s.sender == w.box.user_id and s.relates.get("event_id") == card]  # fmt: skip


def verdicts(w: World) -> list[dict[str, object]]:
    """The owner's verdicts in the ledger (an expiry is recorded as one too: not these)."""
    records = [json.loads(line) for line in ledger_lines(w.home)]
    return [r for r in records if r["kind"] == "verdict" and "owner" in str(r["by"])]


@pytest.fixture(scope="module")
def stranger(enc: World, hs: Homeserver) -> Iterator[Phone]:
    """Someone else in the encrypted room: invited by the owner, on a phone of their own (one
    for the module: nio's crypto stores do not take a second client closed in one process)."""
    w = enc
    other = hs.register(f"other{os.getpid()}x{next(counter)}")
    w.phone.run(w.phone.client.room_invite(w.room, other.user_id))
    with Phone(hs, other, w.home.parent / "stranger-phone") as phone:
        phone.join(w.room)
        w.phone.wait_member(w.room, other.user_id)
        yield phone


def test_an_approval_by_reaction_runs_exactly_the_call_the_card_shows(
    enc: World, stranger: Phone
) -> None:
    w = enc
    if stranger:
        w.model.script("run echo", shell_call(w, "echo card-says-this"), Answer("ran it"))
        root = w.phone.send(w.room, "run echo")
        card = card_of(w, "echo card-says-this")
        (approval,) = w.pending()
        session = w.session_of(root)
        assert f"approval {approval}: shell in session {session}" in w.phone.text_of(card)
        before = len(verdicts(w))
        offered = wait_until(lambda: offered_on(w, card) == ["✅", "🔁", "❌"] or None, 20,
                             "the card's reactions offered")  # fmt: skip
        assert offered
        # a stranger's reaction, and the owner's on another event, settle nothing
        stranger.react(w.room, card, "✅")
        w.box_post("Only an owner's reaction settles a card")
        w.phone.react(w.room, root, "✅")
        w.box_post("That is not an approval card")
        assert w.pending() == [approval]
        assert len(verdicts(w)) == before
    # the owner's, on the card, settles exactly that approval
    w.phone.react(w.room, card, "✅")
    w.box_post("ran it")
    assert w.pending() == []
    (verdict,) = verdicts(w)[before:]
    assert verdict["approval"] == approval and verdict["approve"] is True
    assert verdict["by"] == f"owner (matrix {w.phone.user}) via gatewayd"
    records = [json.loads(line) for line in ledger_lines(w.home)]
    (decision,) = [r for r in records if r.get("approval") == approval and r["kind"] == "decision"]
    assert json.loads(decision["arguments"])["command"] == "echo card-says-this"
    settled = w.phone.text_of(card)
    assert settled.endswith(f"approved by {w.phone.user}") and "React" not in settled
    # a second verdict changes nothing, and is answered once
    w.phone.react(w.room, card, "❌")
    w.box_post("Already settled")
    assert len(verdicts(w)) == before + 1


def test_a_reaction_after_expiry_changes_nothing(plain: World) -> None:
    w = plain  # approvals expire after a second here
    w.model.script("run late", shell_call(w, "echo too-late"), Answer("(after expiry)"))
    w.phone.send(w.room, "run late")
    card = card_of(w, "echo too-late")
    w.phone.wait_post(
        w.box.user_id,
        lambda p, text: p.event_id == card and text.endswith(": expired"),
        30,
        "the card edited: expired",
    )
    before = len(verdicts(w))
    w.phone.react(w.room, card, "✅")
    w.box_post("Already settled (expired)")
    assert len(verdicts(w)) == before


STOPPED = "(the turn was stopped by the owner)"


def stopped_posts(w: World) -> int:
    return sum(1 for p in w.phone.posts_of(w.box.user_id) if w.phone.text_of(p.event_id) == STOPPED)


def test_stop_in_a_thread_stops_its_turn_and_stop_all_stops_every_turn(enc: World) -> None:
    w = enc
    for words in ("slow one", "slow two", "slow three"):
        w.model.script(words, Answer("never said", delay_s=60))
    before = stopped_posts(w)
    root = w.phone.send(w.room, "slow one")
    wait_until(lambda: w.model.requests_for("slow one"), 20, "the model asked")
    w.phone.send(w.room, "stop", thread=root)
    w.box_post("Stopped.")
    wait_until(lambda: stopped_posts(w) == before + 1, 20, "the turn stopped")
    # the kill switch: every running turn, from the main timeline
    w.phone.send(w.room, "slow two")
    w.phone.send(w.room, "slow three")
    wait_until(lambda: w.model.requests_for("slow two") and w.model.requests_for("slow three"),
               20, "both turns asked the model")  # fmt: skip
    # and a job's run, which is no phone session's
    (w.home / "jobs").mkdir(exist_ok=True)
    (w.home / "jobs" / "nightly.toml").write_text(
        'schedule = "0 3 1 1 *"\nprompt = "the nightly job"\ngrants = ["memory"]\n'
    )
    w.model.script("the nightly job", Answer("never said", delay_s=60))
    started = w.daemons["loopd"].ask(JobRun("j1", "nightly"))
    assert isinstance(started, JobRunStarted), started
    wait_until(lambda: w.model.requests_for("the nightly job"), 20, "the job's run asked")
    w.phone.send(w.room, "stop all")
    w.box_post("Stopped 3 of 3 running")
    wait_until(lambda: stopped_posts(w) == before + 3, 20, "all three turns stopped")
    history = w.daemons["loopd"].ask(HistoryQuery("h", started.session, None))
    assert TurnEnd(EndReason.CANCELLED) in [e.event for e in history.events]
    assert not any("never said" in w.phone.text_of(p.event_id)
                   for p in w.phone.posts_of(w.box.user_id))  # fmt: skip


def test_status_answers_with_the_boxs_state(enc: World) -> None:
    w = enc
    root = w.phone.send(w.room, "status")
    post = w.phone.wait_post(w.box.user_id, lambda p, text: "pending approvals:" in text
                             and p.relates.get("m.in_reply_to", {}).get("event_id") == root,
                             30, "the status")  # fmt: skip
    text = w.phone.text_of(post.event_id)
    assert "ledger: ok" in text and "tokens today:" in text


def test_a_turn_that_ends_while_the_homeserver_is_down_arrives_when_it_returns(
    enc: World, hs: Homeserver
) -> None:
    w = enc
    w.model.script("answer later", Answer("said while it was down", delay_s=2))
    w.phone.send(w.room, "answer later")
    wait_until(lambda: w.model.requests_for("answer later"), 20, "the model asked")
    hs.kill()
    try:
        wait_until(lambda: w.link().get("state") == "away", 60, "the channel away")
        # nothing else waits on the homeserver: `bxctl chat`'s socket serves a whole turn
        w.model.script("from the desk", Answer("the desk still works"))
        accepted = w.gatewayd.ask(OwnerMessage("d1", "desk", "from the desk"), timeout=10)
        assert isinstance(accepted, Accepted), accepted
        events = wait_until(lambda: turn_ended(w, "desk"), 20, "the desk's turn")
        assert AssistantText("the desk still works") in events
        time.sleep(1)  # the phone's turn has ended meanwhile; the box holds its messages
    finally:
        hs.start()
    w.box_post("said while it was down", timeout=60)
    wait_until(lambda: w.link().get("state") == "syncing", 30, "the channel syncing again")


def turn_ended(w: World, session: str) -> list[object] | None:
    answer = w.gatewayd.ask(EventsQuery("e", session, 0, 0))
    assert isinstance(answer, Events), answer
    events = [e.event for e in answer.events]
    return events if any(isinstance(e, TurnEnd) for e in events) else None


def test_a_gatewayd_killed_and_started_again_acts_on_no_message_twice(enc: World) -> None:
    w = enc
    w.model.script("count me once", Answer("counted"))
    root = w.phone.send(w.room, "count me once")
    w.box_post("counted")
    os.killpg(w.gatewayd.pid, signal.SIGKILL)
    w.gatewayd.process.wait(timeout=10)
    w.model.script("and me while it was down", Answer("counted too"))
    w.phone.send(w.room, "and me while it was down", thread=root)
    w.start_gatewayd()
    w.box_post("counted too", timeout=60)
    os.killpg(w.gatewayd.pid, signal.SIGKILL)
    w.gatewayd.process.wait(timeout=10)
    w.start_gatewayd()
    wait_until(lambda: w.link().get("state") == "syncing", 30, "the channel syncing again")
    time.sleep(2)  # a sync or two after the restart: nothing is taken again
    assert len(w.model.requests_for("count me once")) == 1
    assert len(w.model.requests_for("and me while it was down")) == 1
    turns = {s.session: s.turns for s in w.daemons["loopd"].ask(SessionsQuery("s")).sessions}
    assert turns[w.session_of(root)] == 2


def test_a_sub_agents_turn_shows_in_its_parents_thread(plain: World) -> None:
    w = plain
    w.model.script("ask a helper", w.model.calls(("spawn", args(task="helper: say hi"))),
                   Answer("the helper said hi"))  # fmt: skip
    w.model.script("helper: say hi", Answer("hi from the helper"))
    root = w.phone.send(w.room, "ask a helper")
    w.box_post("the helper said hi")
    sub = w.phone.wait_post(w.box.user_id, lambda _p, text: "hi from the helper" in text, 30,
                            "the sub-agent's turn")  # fmt: skip
    assert w.phone.text_of(sub.event_id).startswith(f"sub-agent sub-{w.session_of(root)}-")
    assert sub.relates.get("event_id") == root


def test_a_card_settled_elsewhere_is_edited_to_say_so(enc: World) -> None:
    w = enc
    w.model.script("run it elsewhere", shell_call(w, "echo from-the-desk"), Answer("desk ran it"))
    w.phone.send(w.room, "run it elsewhere")
    card = card_of(w, "echo from-the-desk")
    (approval,) = w.pending()
    verdict = VerdictRequest("v1", approval, True, Scope.ONCE, "owner (bxctl)")
    assert isinstance(w.daemons["brokerd"].ask(verdict, socket="admin"), Settled)
    w.box_post("desk ran it")
    w.phone.wait_post(w.box.user_id, lambda p, text: p.event_id == card
                      and text.endswith(": approved elsewhere"), 30, "the card edited")  # fmt: skip


def test_a_turn_that_ends_while_gatewayd_is_down_is_edited_in_place_after(enc: World) -> None:
    w = enc
    w.model.script("a long job", w.model.calls(("read_file", args(path="/nowhere/long"))),
                   Answer("finished while gatewayd was away", delay_s=3))  # fmt: skip
    w.phone.send(w.room, "a long job")
    post = w.phone.wait_post(w.box.user_id, lambda _p, text: '"/nowhere/long"' in text, 30,
                             "the turn's message")  # fmt: skip
    wait_until(lambda: len(w.model.requests_for("a long job")) == 2, 20, "the second step")
    os.killpg(w.gatewayd.pid, signal.SIGKILL)
    w.gatewayd.process.wait(timeout=10)
    time.sleep(3.5)  # the turn ends meanwhile
    w.start_gatewayd()
    w.phone.wait_post(w.box.user_id, lambda p, text: p.event_id == post.event_id
                      and "finished while gatewayd was away" in text, 60,
                      "the same message edited")  # fmt: skip
    text = w.phone.text_of(post.event_id)
    assert text.count('"/nowhere/long"') == 1  # every line once
