"""Stopping a turn (`Turns.cancel`, SPEC §12.2), in-process: a model request in flight is
abandoned, a call in flight (sent, or waiting for an approval) is left to brokerd and its result
never reaches the model, sub-agents stop with their parent, and the next owner message runs a
turn as usual, the stopped one in its history."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import anyio
import pytest

from bxcore.client import Client
from bxcore.config.file import Config
from bxcore.home.layout import Home
from bxcore.labels import DataClass, Label
from bxcore.wire.messages import (
    Absorb,
    AssistantText,
    AwaitApproval,
    Done,
    EndReason,
    OwnerSaid,
    OwnerWords,
    Pending,
    State,
    ToolCalled,
    ToolDone,
    ToolPending,
    ToolRequest,
    ToolResponse,
    Tools,
    ToolsQuery,
    TurnEnd,
    TurnEvent,
    WordsKept,
)
from services.loopd.history import SessionLog
from services.loopd.model import Message, Offer, Reply, ToolCall, ToolResult, User
from services.loopd.sessions import Sessions
from services.loopd.tools import CANCELLED_RESULT
from services.loopd.turn import Turns

pytestmark = pytest.mark.anyio

READ = '{"path":"/w/a.md"}'


class Model:
    """Answers by the owner's message (the last user message): `wait` hangs until cancelled,
    `read` calls read_file once and then repeats what it read, `spawn` hands `wait` to a
    sub-agent, anything else is answered at once. Every request is kept."""

    def __init__(self) -> None:
        self.requests: list[list[Message]] = []
        self.asked = anyio.Event()  # a request is in flight

    async def complete(
        self, system: str, messages: Sequence[Message], tools: Sequence[Offer]
    ) -> Reply:
        self.requests.append(list(messages))
        self.asked.set()
        said = next(m.text for m in reversed(messages) if isinstance(m, User))
        last = messages[-1]
        if said == "wait":
            await anyio.sleep_forever()
        if said == "read":
            if isinstance(last, ToolResult):
                return Reply(f"read: {last.content}")
            return Reply("", (ToolCall("m1", "read_file", READ),))
        if said == "spawn":
            if isinstance(last, ToolResult):
                return Reply(f"the child said: {last.content}")
            return Reply("", (ToolCall("m1", "spawn", '{"task":"wait"}'),))
        return Reply(f"you said {said}")

    async def aclose(self) -> None:
        pass


class Broker:
    """brokerd: a read_file either hangs (`hang`), or is pending and its approval never comes
    (`pending`), or is done; `absorb` is taken; no MCP tools. `closed` counts the clients
    closed after a tool call (not after the turn's `tools_query`)."""

    def __init__(self, how: str) -> None:
        self.how = how
        self.sent: list[Any] = []
        self.closed = 0

    async def ask(self, message: Any, **_: Any) -> Any:
        if isinstance(message, OwnerWords):  # kept, and not counted among the calls
            return WordsKept(message.id, message.session, message.turn, True)
        self.sent.append(message)
        if isinstance(message, ToolsQuery):
            return Tools(message.id, ())
        if isinstance(message, Absorb):
            return State(message.id, message.session, Label(DataClass.PUBLIC, False))
        if isinstance(message, ToolRequest) and self.how == "pending":
            return ToolResponse(message.id, Pending("k3v9qz2m"))
        if isinstance(message, ToolRequest | AwaitApproval) and self.how != "done":
            await anyio.sleep_forever()
        return ToolResponse(
            message.id, Done(True, "the file's text", Label(DataClass.PUBLIC, False))
        )

    def close(self) -> None:
        if not isinstance(self.sent[-1], ToolsQuery):
            self.closed += 1


class Box:
    """Turns over a real history folder, a fake model and a fake broker."""

    def __init__(self, tmp_path: Path, broker: Broker) -> None:
        self.sessions = Sessions(Home(tmp_path))
        self.model = Model()
        self.broker = broker
        self.published: list[TurnEvent] = []
        self.turns = Turns(
            Config(),
            self.model,
            lambda: cast(Client, broker),
            self.sessions.held,
            self.published.append,
            self.sessions.exists,
        )

    async def say(self, session: SessionLog, text: str) -> int:
        turn = session.turns + 1
        session.event(turn, OwnerSaid(text))
        return turn

    def events(self, session: str) -> list[tuple[int, Any]]:
        return [(e.turn, e.event) for e in self.sessions.page(session, 0, 10**9)[0]]


async def stopped_while(box: Box, session: SessionLog, text: str, ready: anyio.Event) -> str:
    """Run a turn of `text`, stop it once `ready` is set; what the turn returned."""
    said: list[str] = []
    turn = await box.say(session, text)

    async def run() -> None:
        said.append(await box.turns.run(session, turn))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(run)
            await ready.wait()
            await anyio.sleep(0.01)  # let the turn reach its wait
            assert await box.turns.cancel(session.session) == turn
    return said[0]


async def test_a_turn_waiting_on_the_model_ends_cancelled_and_the_next_one_runs(
    tmp_path: Path,
) -> None:
    box = Box(tmp_path, Broker("done"))
    with box.sessions.held("s") as session:
        assert await stopped_while(box, session, "wait", box.model.asked) == ""
        assert await box.turns.cancel("s") is None  # nothing runs now
        assert await box.turns.run(session, await box.say(session, "hello")) == "you said hello"
    assert box.events("s") == [
        (1, OwnerSaid("wait")),
        (1, TurnEnd(EndReason.CANCELLED)),
        (2, OwnerSaid("hello")),
        (2, AssistantText("you said hello")),
        (2, TurnEnd(EndReason.DONE)),
    ]
    assert box.model.requests[-1] == [User("wait"), User("hello")]
    assert [e.event for e in box.published][-1] == TurnEnd(EndReason.DONE)
    assert "0 running" in repr(box.turns)


@pytest.mark.parametrize("how", ["hang", "pending"])
async def test_a_call_in_flight_is_left_to_brokerd_and_its_result_never_reaches_the_model(
    tmp_path: Path, how: str
) -> None:
    box = Box(tmp_path, Broker(how))
    sent = anyio.Event()
    real = box.broker.ask

    async def noted(message: Any, **options: Any) -> Any:
        if isinstance(message, ToolRequest if how == "hang" else AwaitApproval):
            sent.set()
        return await real(message, **options)

    box.broker.ask = noted  # type: ignore[method-assign]
    with box.sessions.held("s") as session:
        assert await stopped_while(box, session, "read", sent) == ""
        box.broker.how = "done"
        assert await box.turns.run(session, await box.say(session, "again")) == "you said again"
    events = [event for turn, event in box.events("s") if turn == 1]
    assert events == [
        OwnerSaid("read"),
        ToolCalled("read_file", READ),
        *([ToolPending("read_file", "k3v9qz2m")] if how == "pending" else []),
        TurnEnd(EndReason.CANCELLED),
    ]
    assert box.broker.closed == 1  # the abandoned request's socket is closed, not reused
    # What the model reads of the stopped call, the next turn: the call could not be read.
    history = box.model.requests[-1]
    results = [m for m in history if isinstance(m, ToolResult)]
    assert [r.content for r in results] == [CANCELLED_RESULT]
    assert history[-1] == User("again")


async def test_sub_agents_stop_with_their_parent(tmp_path: Path) -> None:
    box = Box(tmp_path, Broker("done"))
    with box.sessions.held("p") as parent:
        assert await stopped_while(box, parent, "spawn", box.model.asked) == ""
    assert box.events("sub-p-1") == [(1, OwnerSaid("wait")), (1, TurnEnd(EndReason.CANCELLED))]
    assert box.events("p") == [
        (1, OwnerSaid("spawn")),
        (1, ToolCalled("spawn", '{"task":"wait"}')),
        (1, TurnEnd(EndReason.CANCELLED)),
    ]
    assert not any(isinstance(m, Absorb) for m in box.broker.sent)  # nothing of it was read


async def test_a_sub_agent_stopped_alone_is_a_failed_spawn_its_parent_reads(
    tmp_path: Path,
) -> None:
    box = Box(tmp_path, Broker("done"))
    said: list[str] = []
    with box.sessions.held("p") as parent:
        turn = await box.say(parent, "spawn")

        async def run() -> None:
            said.append(await box.turns.run(parent, turn))

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(run)
                await box.model.asked.wait()
                await anyio.sleep(0.01)
                assert await box.turns.cancel("sub-p-1") == 1
    stopped = "Error: the owner stopped the sub-agent before it answered."
    assert said == [f"the child said: {stopped}"]
    events = [event for _, event in box.events("p")]
    assert ToolDone("spawn", False, len(stopped), stopped) in events
    assert events[-1] == TurnEnd(EndReason.DONE)


async def test_a_stop_before_the_turn_began_stops_it(tmp_path: Path) -> None:
    """Stop pressed right after Send: the worker has not begun the turn yet; it never asks
    the model, and ends cancelled once it does begin."""
    box = Box(tmp_path, Broker("done"))
    with box.sessions.held("s") as session:
        turn = await box.say(session, "stop me at once")
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tasks:
                answered: list[int | None] = []

                async def stop() -> None:
                    answered.append(await box.turns.cancel("s", waiting=turn))

                tasks.start_soon(stop)
                await anyio.sleep(0.01)  # the cancel waits for the turn it stopped to end
                assert await box.turns.run(session, turn) == ""
        assert answered == [turn]
        assert box.model.requests == []
        assert await box.turns.run(session, await box.say(session, "hello")) == "you said hello"
    assert box.events("s") == [
        (1, OwnerSaid("stop me at once")),
        (1, TurnEnd(EndReason.CANCELLED)),
        (2, OwnerSaid("hello")),
        (2, AssistantText("you said hello")),
        (2, TurnEnd(EndReason.DONE)),
    ]
