"""loopd's memory stays bounded (issue 10): after 2,000 sessions its RSS is within a few MB of
what it was before them, while the session list still names every one and an old session can
be read and continued, before and after a restart.

Real loopd over its real sockets and a zero-latency fake model over HTTP that answers in words:
no call is made, so brokerd is not started and the figure is loopd's alone.
`bench/loop_memory.py` runs the same with tool calls, 10,000 sessions and 1M calls.
"""

from __future__ import annotations

import statistics
import time

from bxcore.wire.messages import (
    AssistantText,
    EndReason,
    History,
    HistoryQuery,
    OwnerSaid,
    SessionList,
    SessionsQuery,
    TurnEnd,
    TurnEvent,
)
from tests.fakes.model_server import FakeModel
from tests.support.brokerd import short_folder
from tests.support.crowd import Crowd, crowd_model, rss_mb
from tests.support.daemons import init_home, running
from tests.support.loopd import messages

SESSIONS = 2_000
WORDS = 8_000  # each session's answer: its history is ~17 KB (the answer is in it twice)
BOUND_MB = 8  # measured: +1.2 MB here, +20 MB with every history kept (before issue 10)


def settled_rss(pid: int) -> float:
    time.sleep(0.3)
    return statistics.median(rss_mb(pid) for _ in range(5))


def history(crowd: Crowd, session: str) -> list[TurnEvent]:
    events: list[TurnEvent] = []
    while True:
        after = events[-1].seq if events else None
        page = crowd.ask(HistoryQuery(f"h-{len(events)}", session, after))
        assert isinstance(page, History), page
        events += page.events
        if not page.more:
            return events


def listed(crowd: Crowd) -> dict[str, tuple[int, bool]]:
    answer = crowd.ask(SessionsQuery("list"))
    assert isinstance(answer, SessionList), answer
    return {s.session: (s.turns, s.busy) for s in answer.sessions}


def continued(crowd: Crowd, model: FakeModel, session: str) -> None:
    """A second turn of an old session: the model reads the first, and the turn ends."""
    crowd.run([(session, "and again")])
    events = history(crowd, session)
    assert [e.turn for e in events if isinstance(e.event, TurnEnd)] == [1, 2]
    said = [(m["role"], m.get("content")) for m in messages(model.requests[-1])]
    assert ("user", "go") in said and ("user", "and again") in said


def test_after_two_thousand_sessions_loopd_holds_little_more_and_forgets_none() -> None:
    with short_folder() as root, FakeModel() as model:
        model.respond_with(crowd_model(steps=0, text_bytes=WORDS))
        home = init_home(root / "h", f'[model]\nbase_url = "{model.base_url}"\n')
        with running("loopd", home) as loopd, Crowd(home) as crowd:
            crowd.run((f"warm-{n}", "go") for n in range(50))  # the code paths, the caches
            before = settled_rss(loopd.pid)
            crowd.run((f"s-{n}", "go") for n in range(SESSIONS))
            after = settled_rss(loopd.pid)

            assert crowd.turns == 50 + SESSIONS
            assert after - before <= BOUND_MB, f"{before:.1f} MB -> {after:.1f} MB"
            sessions = listed(crowd)
            assert len(sessions) == 50 + SESSIONS
            assert {sessions[f"s-{n}"] for n in range(SESSIONS)} == {(1, False)}
            first = [e.event for e in history(crowd, "s-0")]
            assert first[0] == OwnerSaid("go") and first[-1] == TurnEnd(EndReason.DONE)
            assert any(isinstance(e, AssistantText) and len(e.text) == WORDS for e in first)
            continued(crowd, model, "s-0")

        with running("loopd", home) as loopd, Crowd(home) as crowd:
            sessions = listed(crowd)
            assert len(sessions) == 50 + SESSIONS and sessions["s-0"] == (2, False)
            continued(crowd, model, "s-1")
            assert rss_mb(loopd.pid) - before <= BOUND_MB
