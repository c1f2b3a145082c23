"""A turn and the loaded-histories cache (`services.loopd.turn` with `sessions`), in-process:
with a cache that keeps nothing idle, a parent's turn and its sub-agent's each write through
one copy of their history, and a history page read meanwhile sees what they wrote."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import pytest

from bxcore.client import Client
from bxcore.config.file import Config
from bxcore.home.layout import Home
from bxcore.labels import DataClass, Label
from bxcore.wire.messages import (
    Absorb,
    AssistantText,
    EndReason,
    OwnerSaid,
    State,
    ToolCalled,
    ToolDone,
    Tools,
    ToolsQuery,
    TurnEnd,
    TurnEvent,
)
from services.loopd.model import Message, Offer, Reply, ToolCall, ToolResult, User
from services.loopd.sessions import Sessions
from services.loopd.turn import Turns

pytestmark = pytest.mark.anyio


class Model:
    """The parent spawns once and repeats what it read; the child answers at once. While the
    child answers, its page is read, as the console would, and both sessions are asked for."""

    def __init__(self, sessions: Sessions) -> None:
        self.sessions = sessions
        self.pages: list[list[TurnEvent]] = []
        self.one_copy: list[bool] = []

    async def complete(
        self, system: str, messages: Sequence[Message], tools: Sequence[Offer]
    ) -> Reply:
        first = messages[0]
        assert isinstance(first, User)
        if first.text == "the child's task":
            self.pages.append(self.sessions.page("sub-parent-1", 0, 1_000_000)[0])
            get = self.sessions.get
            self.one_copy += [get(n) is get(n) for n in ("parent", "sub-parent-1")]
            return Reply("the child's answer")
        last = messages[-1]
        if isinstance(last, ToolResult):
            return Reply(f"the parent read: {last.content}")
        return Reply("", (ToolCall("m1", "spawn", '{"task":"the child\'s task"}'),))

    async def aclose(self) -> None:
        pass


class Broker:
    """Takes every `absorb`, and offers no MCP tools; nothing else is asked of it here."""

    async def ask(self, message: Any, **_: Any) -> State | Tools:
        if isinstance(message, ToolsQuery):
            return Tools(message.id, ())
        assert isinstance(message, Absorb)
        return State(message.id, message.session, Label(DataClass.PUBLIC, False))

    def close(self) -> None:
        pass


async def test_a_parent_and_its_sub_agent_each_write_through_one_copy_with_nothing_kept_idle(
    tmp_path: Path,
) -> None:
    sessions = Sessions(Home(tmp_path), max_loaded=0, max_bytes=0)
    model = Model(sessions)
    published: list[TurnEvent] = []
    turns = Turns(
        Config(),
        model,
        lambda: cast(Client, Broker()),
        sessions.held,
        published.append,
        sessions.exists,
    )

    with sessions.held("parent") as parent:
        parent.event(1, OwnerSaid("go"))
        said = await turns.run(parent, 1)

    assert said == "the parent read: the child's answer"
    assert len(sessions.page("sub-parent-1", 0, 1)[0]) == 1  # nothing loaded: from the file
    child = sessions.page("sub-parent-1", 0, 1_000_000)[0]
    assert [(e.seq, e.event) for e in child] == [
        (1, OwnerSaid("the child's task")),
        (2, AssistantText("the child's answer")),
        (3, TurnEnd(EndReason.DONE)),
    ]
    assert model.pages == [child[:1]]  # read while the child's turn ran
    assert model.one_copy == [True, True]  # held while used, however small the cache
    events = [e.event for e in sessions.page("parent", 0, 1_000_000)[0]]
    assert events == [
        OwnerSaid("go"),
        ToolCalled("spawn", '{"task":"the child\'s task"}'),
        ToolDone("spawn", True, len(b"the child's answer"), "the child's answer"),
        AssistantText(said),
        TurnEnd(EndReason.DONE),
    ]
    assert [e.seq for e in sessions.page("parent", 0, 1_000_000)[0]] == [1, 2, 3, 4, 5]
    assert sessions.names() == ["parent", "sub-parent-1"]
    assert [sessions.summary(n).turns for n in sessions.names()] == [1, 1]
    assert "Cache(0 of 0" in repr(sessions)
    assert sorted({e.session for e in published}) == ["parent", "sub-parent-1"]


class Spawner:
    """The parent spawns with `arguments` and then repeats what it read; the child says
    `child_says`."""

    def __init__(self, arguments: str, child_says: str) -> None:
        self.arguments = arguments
        self.child_says = child_says

    async def complete(
        self, system: str, messages: Sequence[Message], tools: Sequence[Offer]
    ) -> Reply:
        first, last = messages[0], messages[-1]
        assert isinstance(first, User)
        if first.text != "go":
            return Reply(self.child_says)
        if isinstance(last, ToolResult):
            return Reply(last.content)
        return Reply("", (ToolCall("m1", "spawn", self.arguments),))

    async def aclose(self) -> None:
        pass


@pytest.mark.parametrize(
    ("arguments", "child_says", "read", "ok"),
    [
        ('{"task":"t"}', "Error: none, I only begin so", "Error: none, I only begin so", True),
        ('{"task":"t"}', "done", "done", True),
        (
            '{"task":3}',
            "",
            'Error: spawn takes {"task": "…"}: one string field, nothing else.',
            False,
        ),
    ],
    ids=["words-that-begin-with-Error", "plain-words", "bad-arguments"],
)
async def test_a_spawn_is_done_ok_when_the_sub_agent_answered_whatever_its_words(
    tmp_path: Path, arguments: str, child_says: str, read: str, ok: bool
) -> None:
    sessions = Sessions(Home(tmp_path))
    turns = Turns(
        Config(),
        Spawner(arguments, child_says),
        lambda: cast(Client, Broker()),
        sessions.held,
        lambda _: None,
        sessions.exists,
    )
    with sessions.held("parent") as parent:
        parent.event(1, OwnerSaid("go"))
        assert await turns.run(parent, 1) == read
    events = [e.event for e in sessions.page("parent", 0, 1_000_000)[0]]
    assert ToolDone("spawn", ok, len(read.encode()), read) in events
