"""Token accounting through the real loopd (issue 16), with the fake model server saying what
each answer cost, for both providers, whole and streamed: the turn that reaches `[loop]
max_tokens_per_day` stops after its answer (`budget`, its calls not run), the next turn is
refused with an event naming the key, and a restarted loopd still counts the day's tokens."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bxcore.wire.messages import (
    EndReason,
    History,
    HistoryQuery,
    OwnerMessage,
    SessionList,
    SessionsQuery,
    Tokens,
    TokensQuery,
    ToolCalled,
    TurnEnd,
    TurnError,
    TurnEvent,
)
from tests.fakes.model_server import FakeModel
from tests.support.brokerd import short_folder
from tests.support.daemons import Daemon, init_home, running

HOSTNAME = ("read_file", json.dumps({"path": "/etc/hostname"}, separators=(",", ":")))


def ended_history(loopd: Daemon, session: str, timeout: float = 20.0) -> list[TurnEvent]:
    deadline = time.monotonic() + timeout
    while True:
        history = loopd.ask(HistoryQuery("h", session))
        assert isinstance(history, History)
        if history.events and isinstance(history.events[-1].event, TurnEnd):
            return list(history.events)
        assert time.monotonic() < deadline, f"{session} never ended: {history.events}"
        time.sleep(0.05)


@pytest.fixture
def folder() -> Iterator[Path]:
    with short_folder() as root:
        yield root


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_the_day_cap_stops_the_turn_that_reaches_it_and_refuses_the_next_across_a_restart(
    folder: Path, provider: str, stream: bool
) -> None:
    with FakeModel() as model:
        config = (
            f'[model]\nprovider = "{provider}"\nbase_url = "{model.base_url}"\n'
            f"stream = {'true' if stream else 'false'}\n[loop]\nmax_tokens_per_day = 1000\n"
        )
        home = init_home(folder / "h", config)
        model.reply(tool_calls=[HOSTNAME], usage=(600, 50))
        model.reply(tool_calls=[HOSTNAME], usage=(300, 100))  # 1050: the cap is reached
        with running("brokerd", home), running("memoryd", home):
            with running("loopd", home) as loopd:
                loopd.ask(OwnerMessage("o1", "chat-1", "read the hostname twice"))
                first = [e.event for e in ended_history(loopd, "chat-1")]
                assert first.count(ToolCalled(*HOSTNAME)) == 1  # the second call never ran
                assert first[-1] == TurnEnd(EndReason.BUDGET, 1050)
                error = first[-2]
                assert isinstance(error, TurnError)
                assert "[loop] max_tokens_per_day is 1000, so this turn stops" in error.message
                today = loopd.ask(TokensQuery("t1"))
                assert isinstance(today, Tokens)
                assert (today.tokens, today.max_per_day) == (1050, 1000)
                if provider == "openai" and stream:
                    assert model.requests[0]["stream_options"] == {"include_usage": True}

            with running("loopd", home) as loopd:  # a new loopd counts them from the histories
                again = loopd.ask(TokensQuery("t2"))
                assert isinstance(again, Tokens)
                assert (again.day, again.tokens) == (today.day, 1050)
                loopd.ask(OwnerMessage("o2", "chat-2", "anything"))
                refused = [e.event for e in ended_history(loopd, "chat-2")]
                assert refused[-1] == TurnEnd(EndReason.BUDGET)
                assert isinstance(refused[-2], TurnError)
                assert "max_tokens_per_day is 1000, so no turn runs until midnight" in (
                    refused[-2].message
                )
                sessions = loopd.ask(SessionsQuery("s"))
                assert isinstance(sessions, SessionList)
                assert {s.session: s.tokens for s in sessions.sessions} == {
                    "chat-1": 1050,
                    "chat-2": None,
                }
        assert len(model.requests) == 2  # the refused turn never asked the model
