"""Token accounting (issue 16), in-process with a controlled clock: the day a figure counts on
is the local day; a turn past its budget, or the one that reaches the day's cap, ends `budget`
after its answer without running its calls; no turn starts once the cap is reached, until
midnight; the figures are in the history, so a new loopd counts them again."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, cast
from zoneinfo import ZoneInfo

import pytest

from bxcore.client import Client
from bxcore.clock import parse_rfc3339
from bxcore.config.file import Config
from bxcore.deny import DenyReason
from bxcore.home.layout import Home
from bxcore.wire.messages import (
    AssistantText,
    Denied,
    EndReason,
    OwnerSaid,
    ToolCalled,
    ToolDenied,
    ToolResponse,
    Tools,
    ToolsQuery,
    TurnEnd,
    TurnError,
)
from services.loopd.history import SessionLog
from services.loopd.history_records import ModelReply, Spent
from services.loopd.history_scan import outline
from services.loopd.model import Message, Offer, Reply, ToolCall, Usage
from services.loopd.sessions import Sessions
from services.loopd.turn import Turns
from services.loopd.usage import BUDGET_RESULT, KEPT_DAYS, Meter, Tally, day_of

pytestmark = pytest.mark.anyio

BERLIN = ZoneInfo("Europe/Berlin")
NOON = parse_rfc3339("2026-12-01T11:00:00.000Z")  # 12:00 in Berlin
HOUR = 3_600_000


class Clock:
    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


class Model:
    """Calls `read_file` at every step, each answer costing `cost` tokens (read, written)."""

    def __init__(self, cost: tuple[int, int] = (900, 100)) -> None:
        self.cost = cost
        self.asked = 0

    async def complete(
        self, system: str, messages: Sequence[Message], tools: Sequence[Offer]
    ) -> Reply:
        self.asked += 1
        call = ToolCall(f"c{self.asked}", "read_file", '{"path":"/a"}')
        return Reply(f"step {self.asked}", (call,), usage=Usage(*self.cost))

    async def aclose(self) -> None:
        pass


class Broker:
    """Denies every call (`no_grant`), and offers no MCP tools."""

    async def ask(self, message: Any, **_: Any) -> Tools | ToolResponse:
        if isinstance(message, ToolsQuery):
            return Tools(message.id, ())
        return ToolResponse(message.id, Denied(DenyReason.NO_GRANT))

    def close(self) -> None:
        pass


def turns_of(tmp_path: Path, model: Model, meter: Meter, **loop: int) -> tuple[Turns, Sessions]:
    config = Config()
    config = replace(config, loop=replace(config.loop, **loop))
    sessions = Sessions(Home(tmp_path), tally=meter.tally)
    broker = lambda: cast(Client, Broker())  # noqa: E731
    turns = Turns(
        config, model, broker, sessions.held, lambda e: None, sessions.exists, meter=meter
    )
    return turns, sessions


async def run_turn(turns: Turns, sessions: Sessions, name: str, max_tokens: int | None) -> str:
    with sessions.held(name) as session:
        turn = session.turns + 1
        session.event(turn, OwnerSaid("go"))
        return await turns.run(session, turn, max_tokens=max_tokens)


def events(sessions: Sessions, name: str) -> list[Any]:
    return [e.event for e in sessions.page(name, 0, 10_000_000)[0]]


def test_a_figure_counts_on_the_local_day_it_was_spent_on() -> None:
    late = parse_rfc3339("2026-12-01T23:30:00.000Z")  # 00:30 on the 2nd in Berlin
    assert day_of(late, datetime.UTC) == "2026-12-01"
    assert day_of(late, BERLIN) == "2026-12-02"
    tally = Tally(BERLIN)
    tally.add(NOON, 10)
    tally.add(late, 5)
    assert tally.today(NOON) == ("2026-12-01", 10)
    assert tally.today(late + HOUR) == ("2026-12-02", 5)
    assert "5 tokens on 2026-12-02" in repr(tally)


def test_a_tally_keeps_only_its_newest_days() -> None:
    tally = Tally(datetime.UTC)
    for day in range(KEPT_DAYS + 5):
        tally.add(NOON + day * 24 * HOUR, day + 1)
    assert tally.on("2026-12-01") == 0  # the oldest let go
    assert tally.today(NOON + (KEPT_DAYS + 4) * 24 * HOUR)[1] == KEPT_DAYS + 5


def test_a_meter_stamps_and_counts_each_answer_and_says_when_to_stop() -> None:
    clock = Clock(NOON)
    meter = Meter(Tally(BERLIN), 1000, clock)
    assert meter.spend(None) is None
    assert meter.spend(Usage(600, 50)) == Spent(600, 50, "2026-12-01T11:00:00.000Z")
    assert meter.refusal() is None
    assert meter.stop(650, None) is None
    assert meter.stop(650, 600) == (
        "this turn used 650 tokens, more than its budget of 600, so it stops here and its "
        "last answer's tool calls were not run"
    )
    meter.spend(Usage(300, 50))
    assert meter.refusal() == (
        "the box has used 1000 tokens today (2026-12-01), [loop] max_tokens_per_day is 1000, "
        "so no turn runs until midnight; raise the key in config.toml to go on"
    )
    clock.now_ms += 13 * HOUR  # 01:00 the next day in Berlin
    assert (meter.today(), meter.refusal()) == (("2026-12-02", 0), None)
    assert Meter(Tally(BERLIN), 0, clock).refusal() is None  # 0: no cap


async def test_a_turn_past_its_budget_ends_budget_after_that_answer_without_its_calls(
    tmp_path: Path,
) -> None:
    model = Model((900, 100))
    turns, sessions = turns_of(tmp_path, model, Meter(Tally(BERLIN), 0, Clock(NOON)))
    said = await run_turn(turns, sessions, "job-mail-1", max_tokens=2500)
    assert said == "step 3"  # 1000, 2000, then 3000 > 2500
    assert model.asked == 3
    shown = events(sessions, "job-mail-1")
    assert shown[-2:] == [
        TurnError(
            "this turn used 3000 tokens, more than its budget of 2500, so it stops here and "
            "its last answer's tool calls were not run"
        ),
        TurnEnd(EndReason.BUDGET, 3000),
    ]
    assert shown.count(ToolCalled("read_file", '{"path":"/a"}')) == 2  # the third never ran
    assert shown.count(ToolDenied("read_file", DenyReason.NO_GRANT)) == 2
    session = sessions.get("job-mail-1")
    assert session.turn_tokens(1) == session.tokens == 3000
    assert session.open_calls(1) == []  # the next turn's transcript is whole
    assert session.transcript(1)[-1].content == BUDGET_RESULT  # type: ignore[union-attr]


async def test_the_turn_reaching_the_days_cap_stops_and_no_turn_starts_until_midnight(
    tmp_path: Path,
) -> None:
    clock = Clock(NOON)
    model = Model((450, 50))
    meter = Meter(Tally(BERLIN), 1200, clock)
    turns, sessions = turns_of(tmp_path, model, meter, max_tokens_per_day=1200)
    await run_turn(turns, sessions, "chat-1", max_tokens=None)
    assert model.asked == 3  # 500, 1000, 1500: the answer that reached it is the last
    assert events(sessions, "chat-1")[-1] == TurnEnd(EndReason.BUDGET, 1500)
    assert "[loop] max_tokens_per_day is 1200, so this turn stops" in str(
        events(sessions, "chat-1")[-2]
    )

    said = await run_turn(turns, sessions, "chat-2", max_tokens=None)
    assert (said, model.asked) == ("", 3)  # the model is never asked
    assert events(sessions, "chat-2") == [
        OwnerSaid("go"),
        TurnError(
            "the box has used 1500 tokens today (2026-12-01), [loop] max_tokens_per_day is "
            "1200, so no turn runs until midnight; raise the key in config.toml to go on"
        ),
        TurnEnd(EndReason.BUDGET),
    ]

    clock.now_ms += 12 * HOUR + 1  # just past midnight in Berlin
    await run_turn(turns, sessions, "chat-2", max_tokens=None)
    assert model.asked == 6


async def test_an_answer_without_figures_counts_nothing_and_the_turn_end_says_none(
    tmp_path: Path,
) -> None:
    class Quiet(Model):
        async def complete(
            self, system: str, messages: Sequence[Message], tools: Sequence[Offer]
        ) -> Reply:
            return Reply("hello")

    meter = Meter(Tally(BERLIN), 10, Clock(NOON))
    turns, sessions = turns_of(tmp_path, Quiet(), meter, max_tokens_per_day=10)
    await run_turn(turns, sessions, "chat-1", max_tokens=1)
    assert events(sessions, "chat-1")[1:] == [AssistantText("hello"), TurnEnd(EndReason.DONE)]
    assert meter.today() == ("2026-12-01", 0)
    assert sessions.get("chat-1").tokens is None


async def test_a_new_loopd_counts_the_days_tokens_again_from_the_histories(
    tmp_path: Path,
) -> None:
    clock = Clock(NOON)
    turns, sessions = turns_of(tmp_path, Model((450, 50)), Meter(Tally(BERLIN), 0, clock))
    await run_turn(turns, sessions, "chat-1", max_tokens=1000)
    clock.now_ms -= 24 * HOUR  # an answer of yesterday's
    await run_turn(turns, sessions, "chat-2", max_tokens=400)

    tally = Tally(BERLIN)
    again = Sessions(Home(tmp_path), tally=tally)
    assert again.scan() == []
    assert again.summary("chat-1").tokens == 1500
    assert again.summary("chat-2").tokens == 500
    assert tally.today(NOON) == ("2026-12-01", 1500)
    assert tally.on("2026-11-30") == 500


def test_the_outline_reads_the_figures_as_loading_does_and_old_lines_have_none(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.jsonl"
    log = SessionLog("s", path)
    log.event(1, OwnerSaid('a text with ,"usage":{"input":1,"output":2,"at":"x"}}'))
    log.append(ModelReply(1, ',"usage":{"input":9,"output":9,"at":"y"}}', (), None))
    log.append(ModelReply(1, "x", (), Spent(7, 3, "2026-12-01T11:00:00.000Z")))
    with path.open("ab") as file:  # a line from before issue 16
        file.write(b'{"type":"model_reply","turn":1,"text":"old","calls":[]}\n')
    read = outline("s", path)
    loaded = SessionLog.load("s", path)
    assert read.spent == loaded.outline().spent == (("2026-12-01T11:00:00.000Z", 10),)
    assert (read.tokens, loaded.tokens, loaded.turn_tokens(1)) == (10, 10, 10)
    assert (
        path.read_bytes()
        .splitlines()[2]
        .endswith(b',"usage":{"input":7,"output":3,"at":"2026-12-01T11:00:00.000Z"}}')
    )
