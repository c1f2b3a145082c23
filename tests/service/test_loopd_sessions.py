"""Turns and sessions (SPEC §10.1): sessions run side by side, one session's turns one at a
time and in order, and a turn stops at `[loop] max_steps` model calls (4 here). The owner may
not name a session like a sub-agent, a spawn never takes a session that has a history, and only
the first `[loop] max_calls_per_reply` calls of one model answer reach brokerd (issue 9).

The fake model answers over real HTTP; brokerd and memoryd are real.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from bxcore.config.file import Config
from bxcore.wire.messages import (
    AssistantText,
    EndReason,
    Error,
    ErrorCode,
    OwnerMessage,
    OwnerSaid,
    SessionList,
    SessionsQuery,
    ToolCalled,
    ToolDone,
    TurnEnd,
    TurnError,
)
from services.loopd.daemon import SUB_SESSION_REFUSED
from services.loopd.tools import too_many_calls, too_many_calls_said
from tests.fakes.model_server import Action, Answer, FakeModel, Request
from tests.fakes.model_server import Call as ModelCall
from tests.support.brokerd import records_of, short_folder
from tests.support.daemons import init_home
from tests.support.loopd import (
    Conversations,
    Loop,
    answer,
    call,
    messages,
    stack,
    tool_results,
)

MAX_STEPS = 4


@pytest.fixture(scope="module")
def loop() -> Iterator[Loop]:
    with short_folder() as root, FakeModel() as model:
        home = init_home(
            root / "h", f'[model]\nbase_url = "{model.base_url}"\n[loop]\nmax_steps = {MAX_STEPS}\n'
        )
        with stack(home, model, Conversations()) as running:
            yield running


def test_a_slow_session_does_not_hold_up_another(loop: Loop) -> None:
    loop.script("slow words", [answer("A, at last.", delay_s=2.0)])
    loop.script("quick words", [answer("B, at once.")])
    started = time.monotonic()
    loop.say("side-a", "slow words")
    loop.conversations.wait_requests("slow words", 1)  # A is waiting for its model
    loop.say("side-b", "quick words")

    assert loop.wait_end("side-b")[-2:] == [AssistantText("B, at once."), TurnEnd(EndReason.DONE)]
    b_took = time.monotonic() - started
    assert b_took < 1.5
    assert not any(isinstance(e.event, TurnEnd) for e in loop.history("side-a"))
    assert loop.wait_end("side-a")[-2:] == [AssistantText("A, at last."), TurnEnd(EndReason.DONE)]
    assert time.monotonic() - started >= 2.0


def test_two_messages_to_one_session_run_in_order_the_second_seeing_the_first(
    loop: Loop,
) -> None:
    first, second = "what is one plus one?", "and times three?"
    loop.script(first, [answer("Two.", delay_s=0.5), answer("Six.")])
    accepted = [
        loop.loopd.ask(OwnerMessage(f"o{n}", "ordered", text))
        for n, text in enumerate((first, second), 1)
    ]
    assert [(a.id, a.session, a.turn) for a in accepted] == [
        ("o1", "ordered", 1),
        ("o2", "ordered", 2),
    ]
    assert accepted[0].seq == 1 and accepted[1].seq > 1

    assert loop.wait_end("ordered", 1) == [
        OwnerSaid(first),
        AssistantText("Two."),
        TurnEnd(EndReason.DONE),
    ]
    assert loop.wait_end("ordered", 2) == [
        OwnerSaid(second),
        AssistantText("Six."),
        TurnEnd(EndReason.DONE),
    ]
    requests = loop.conversations.requests(first)  # one conversation: keyed by its first words
    assert len(requests) == 2
    assert [(m["role"], m["content"]) for m in messages(requests[1])[1:]] == [
        ("user", first),
        ("assistant", "Two."),
        ("user", second),
    ]
    history = loop.history("ordered")
    assert [(e.turn, type(e.event)) for e in history if isinstance(e.event, OwnerSaid)] == [
        (1, OwnerSaid),
        (2, OwnerSaid),
    ]
    ends = [e.seq for e in history if isinstance(e.event, TurnEnd)]
    assert ends == sorted(ends) and [e.turn for e in history if e.seq in ends] == [1, 2]


def test_a_model_that_always_calls_a_tool_stops_at_max_steps(loop: Loop) -> None:
    (loop.home / "workspace" / "again.md").write_text("again")
    words = "read again.md, forever"
    arguments = json.dumps({"path": f"{loop.home}/workspace/again.md"})

    def again(request: Request) -> Action:
        return call("read_file", arguments)

    loop.conversations.forever(words, again)
    turn = loop.say("forever", words)
    events = loop.wait_end("forever", turn)

    assert events[-1] == TurnEnd(EndReason.MAX_STEPS)
    assert len(loop.conversations.requests(words)) == MAX_STEPS
    assert events.count(ToolCalled("read_file", arguments)) == MAX_STEPS
    assert events.count(ToolDone("read_file", True, len("again"), "again")) == MAX_STEPS
    decided = [r for r in records_of(loop.home, "forever") if r["kind"] == "decision"]
    assert len(decided) == MAX_STEPS
    assert len({r["call"] for r in decided}) == MAX_STEPS


def test_a_long_owner_message_is_kept_whole_and_the_history_pages_past_it(loop: Loop) -> None:
    words = "a long document: " + "z" * 1_500_000  # over half of a message, once encoded
    loop.script(words, [answer("Read it all.")])
    turn = loop.say("long", words)

    assert loop.wait_end("long", turn) == [
        OwnerSaid(words),
        AssistantText("Read it all."),
        TurnEnd(EndReason.DONE),
    ]
    assert messages(loop.conversations.requests(words)[0])[-1]["content"] == words


# --- sessions of the sub-agents' form (issue 9) -----------------------------------------------


def test_an_owner_message_to_a_session_of_the_sub_agents_form_is_refused_writing_nothing(
    loop: Loop,
) -> None:
    for session in ("sub-x-1", "sub-anything"):
        refused = loop.loopd.ask(OwnerMessage(f"o-{session}", session, "hello"))
        assert refused == Error(f"o-{session}", ErrorCode.BAD_MESSAGE, SUB_SESSION_REFUSED)
        assert not (loop.home / "sessions" / f"{session}.jsonl").exists()
        listed = loop.loopd.ask(SessionsQuery("q"))
        assert isinstance(listed, SessionList)
        assert session not in [s.session for s in listed.sessions]
    assert "\n" not in SUB_SESSION_REFUSED


def test_a_spawn_never_takes_over_a_session_that_already_has_a_history(loop: Loop) -> None:
    """Issue 9: `sub-spawner-1` holds an owner's old conversation (made before such names were
    refused); the first spawn of `spawner` gets `sub-spawner-2` and runs its task."""
    loop.script("an old question", [answer("THE OLD ANSWER")])
    loop.wait_end("old-owner", loop.say("old-owner", "an old question"))
    sessions = loop.home / "sessions"
    old = (
        (sessions / "old-owner.jsonl")
        .read_bytes()
        .replace(b'"session":"old-owner"', b'"session":"sub-spawner-1"')
    )
    (sessions / "sub-spawner-1.jsonl").write_bytes(old)
    task = "helper: say something fresh"
    loop.script("spawn a helper please", [call("spawn", task=task), answer("Done.")])
    loop.script(task, [answer("a fresh answer")])

    events = loop.wait_end("spawner", loop.say("spawner", "spawn a helper please"))

    assert events[-1] == TurnEnd(EndReason.DONE)
    requests = loop.conversations.requests("spawn a helper please")
    assert tool_results(requests[-1]) == ["a fresh answer"]
    assert loop.history("sub-spawner-2")[0].event == OwnerSaid(task)
    assert (sessions / "sub-spawner-1.jsonl").read_bytes() == old  # untouched


# --- tool calls in one model reply (issue 9) --------------------------------------------------


def test_only_the_first_max_calls_per_reply_calls_of_one_answer_reach_brokerd(loop: Loop) -> None:
    cap = Config().loop.max_calls_per_reply
    asked = cap + 8
    recall = json.dumps({"action": "recall", "query": "anything"})
    words = f"recall {asked} times at once"
    many = Answer("", tuple(ModelCall("memory", recall) for _ in range(asked)))
    loop.script(words, [many, answer("Enough.")])

    events = loop.wait_end("many", loop.say("many", words))

    decisions = [r for r in records_of(loop.home, "many") if r["kind"] == "decision"]
    assert len(decisions) == cap
    results = tool_results(loop.conversations.requests(words)[-1])
    assert len(results) == asked  # every call of the answer has its result, in its order
    assert results[:cap] == ["no notes match"] * cap
    sentence = too_many_calls(cap).content
    assert results[cap:] == [sentence] * 8
    assert sentence == (
        f"Error: only the first {cap} tool calls of one answer are run; "
        "send the rest again in a later answer."
    )
    assert events.count(ToolCalled("memory", recall)) == cap
    errors = [e for e in events if isinstance(e, TurnError)]
    assert errors == [TurnError(too_many_calls_said(asked, cap))]
    assert events[-2:] == [AssistantText("Enough."), TurnEnd(EndReason.DONE)]
