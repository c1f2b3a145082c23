"""A session longer than its context (issue 28): real loopd, its real sockets and a fake model
over HTTP. The model is sent only the newest turns that fit in `[loop] context_chars` (all
loopd keeps of them in memory), while the owner's history is read whole from the file, from
the first event or from any `after` (what the console's `?after=` asks), and a turn cut off
by a restart resumes with what it was sent before.

No tool is called, so brokerd is not started.
"""

from __future__ import annotations

import time

from bxcore.wire.messages import (
    Accepted,
    AssistantText,
    History,
    HistoryQuery,
    OwnerMessage,
    TurnEnd,
    TurnEvent,
)
from tests.fakes.model_server import Answer, FakeModel, Request
from tests.support.brokerd import short_folder
from tests.support.crowd import Crowd
from tests.support.daemons import init_home, running
from tests.support.loopd import messages

CONTEXT = 2_000  # each turn below is ~630 characters: a request holds 3 earlier turns
WORDS = "x" * 600


def answer(request: Request) -> Answer:
    said = [m["content"] for m in messages(request.body) if m.get("role") == "user"]
    return Answer(f"answer to {said[-1]}: {WORDS}")


def owner_words(request: object) -> list[str]:
    return [m["content"] for m in messages(request) if m.get("role") == "user"]


def history(crowd: Crowd, session: str, after: int = 0) -> list[TurnEvent]:
    events: list[TurnEvent] = []
    while True:
        since = events[-1].seq if events else after
        page = crowd.ask(HistoryQuery(f"h-{since}", session, since or None))
        assert isinstance(page, History), page
        events += page.events
        if not page.more:
            return events


def ended(crowd: Crowd, session: str, turn: int, timeout_s: float = 30.0) -> list[TurnEvent]:
    deadline = time.monotonic() + timeout_s
    while True:
        events = history(crowd, session)
        if any(e.turn == turn and isinstance(e.event, TurnEnd) for e in events):
            return events
        assert time.monotonic() < deadline, f"turn {turn} did not end in {timeout_s} s"
        time.sleep(0.05)


def test_a_long_session_is_sent_its_newest_turns_read_whole_and_resumed_after_a_restart() -> None:
    with short_folder() as root, FakeModel() as model:
        model.respond_with(answer)
        config = f'[model]\nbase_url = "{model.base_url}"\n[loop]\ncontext_chars = {CONTEXT}\n'
        home = init_home(root / "h", config)
        with running("loopd", home) as loopd, Crowd(home) as crowd:
            for n in range(1, 41):
                crowd.run([("long", f"turn {n}")])
            assert owner_words(model.requests[0]) == ["turn 1"]
            assert owner_words(model.requests[-1]) == ["turn 37", "turn 38", "turn 39", "turn 40"]

            events = history(crowd, "long")  # from the file: older than anything loopd keeps
            assert [e.turn for e in events if isinstance(e.event, TurnEnd)] == list(range(1, 41))
            first = next(e.event for e in events if isinstance(e.event, AssistantText))
            assert first == AssistantText(f"answer to turn 1: {WORDS}")
            middle = events[59].seq
            assert history(crowd, "long", after=middle) == events[60:]

            model.stall(60)  # turn 41's request waits: loopd is killed meanwhile
            asked = len(model.requests)
            accepted = crowd.ask(OwnerMessage("m-41", "long", "turn 41"))
            assert isinstance(accepted, Accepted) and accepted.turn == 41
            cut = model.wait_for(asked + 1)[-1]
            loopd.kill()

        with running("loopd", home), Crowd(home) as crowd:
            events = ended(crowd, "long", 41)
            resumed = model.requests[-1]
            assert messages(resumed) == messages(cut)
            assert owner_words(resumed) == ["turn 38", "turn 39", "turn 40", "turn 41"]
            said = [e.event for e in events if e.turn == 41]
            assert AssistantText(f"answer to turn 41: {WORDS}") in said
            crowd.run([("long", "turn 42")])
            assert owner_words(model.requests[-1]) == ["turn 39", "turn 40", "turn 41", "turn 42"]
            assert len(history(crowd, "long")) == 42 * 3
