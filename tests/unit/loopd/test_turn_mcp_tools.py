"""loopd offers the MCP tools brokerd decides now (SPEC §18.4), in-process: asked once at each
turn's start, offered beside the built-ins with their pinned description and schema (as the
model's API takes them), a tool brokerd no longer lists not offered; a brokerd that does not
take the question leaves only the built-ins, one that does not answer leaves the last list
and is not asked again for a while."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import pytest

from bxcore.client import Client, Unreachable
from bxcore.config.file import Config
from bxcore.home.layout import Home
from bxcore.labels import DataClass, Label
from bxcore.tools import BROKERED, SPAWN
from bxcore.wire.messages import (
    Done,
    EndReason,
    Error,
    ErrorCode,
    OfferedTool,
    OwnerSaid,
    OwnerWords,
    ToolRequest,
    ToolResponse,
    Tools,
    ToolsQuery,
    TurnEnd,
    TurnError,
    WordsKept,
)
from services.loopd import anthropic, openai
from services.loopd.broker_link import TOOLS_QUIET_S
from services.loopd.model import McpTool, Message, Offer, Reply, ToolCall, ToolResult
from services.loopd.schemas import mcp_tools
from services.loopd.sessions import Sessions
from services.loopd.turn import Turns

pytestmark = pytest.mark.anyio

SCHEMA = {
    "type": "object",
    "properties": {"folder": {"type": "string", "title": "Folder"}},
    "required": ["folder"],
}
READ = OfferedTool(
    "mcp__mailbox__read_inbox",
    "Read the newest mails of a folder of the mailbox.",
    json.dumps(SCHEMA, sort_keys=True, separators=(",", ":")),
)
SEND = OfferedTool(
    "mcp__mailbox__send_email",
    "Send one mail.",
    '{"properties":{"body":{"type":"string"},"to":{"type":"string"}},"type":"object"}',
)
BUILT_INS = [*BROKERED, SPAWN.name]


class Model:
    """Calls the mailbox's read_inbox once, then says what it read; keeps the tools of each
    request."""

    def __init__(self) -> None:
        self.offered: list[list[Offer]] = []

    async def complete(
        self, system: str, messages: Sequence[Message], tools: Sequence[Offer]
    ) -> Reply:
        self.offered.append(list(tools))
        last = messages[-1]
        if isinstance(last, ToolResult):
            return Reply(f"read: {last.content}")
        return Reply("", (ToolCall("m1", READ.name, '{"folder":"in"}'),))

    async def aclose(self) -> None:
        pass


class Broker:
    """brokerd: lists `tools` (or answers `refuse`, or is not there), runs every call."""

    def __init__(self, tools: tuple[OfferedTool, ...]) -> None:
        self.tools = tools
        self.refuse: Error | None = None
        self.gone = False
        self.sent: list[Any] = []

    async def ask(self, message: Any, **_: Any) -> Any:
        if isinstance(message, OwnerWords):  # kept, and not counted among the calls
            return WordsKept(message.id, message.session, message.turn, True)
        self.sent.append(message)
        if self.gone:
            raise Unreachable("brokerd (test) did not answer")
        if isinstance(message, ToolsQuery):
            return self.refuse or Tools(message.id, self.tools)
        assert isinstance(message, ToolRequest)
        return ToolResponse(message.id, Done(True, "two mails", Label(DataClass.PUBLIC, True)))

    def close(self) -> None:
        pass


class Box:
    def __init__(self, tmp_path: Path, broker: Broker) -> None:
        self.sessions = Sessions(Home(tmp_path))
        self.model = Model()
        self.broker = broker
        self.turns = Turns(
            Config(),
            self.model,
            lambda: cast(Client, broker),
            self.sessions.held,
            lambda event: None,
            self.sessions.exists,
        )

    async def turn(self, session: str, text: str) -> str:
        with self.sessions.held(session) as log:
            turn = log.turns + 1
            log.event(turn, OwnerSaid(text))
            return await self.turns.run(log, turn)

    def names(self, request: int) -> list[str]:
        return [tool.name for tool in self.model.offered[request]]

    def queries(self) -> int:
        return sum(isinstance(m, ToolsQuery) for m in self.broker.sent)

    def ends(self, session: str) -> list[Any]:
        events = self.sessions.page(session, 0, 10**9)[0]
        return [e.event for e in events if isinstance(e.event, TurnEnd | TurnError)]


async def test_the_mcp_tools_are_offered_beside_the_built_ins_asked_once_a_turn(
    tmp_path: Path,
) -> None:
    box = Box(tmp_path, Broker((READ, SEND)))
    assert await box.turn("s", "read my mail") == "read: two mails"
    assert len(box.model.offered) == 2  # the call, then the answer: two model requests
    assert box.names(0) == box.names(1) == [*BUILT_INS, READ.name, SEND.name]
    assert box.queries() == 1
    offered = box.model.offered[0][-2]
    assert offered == McpTool(READ.name, READ.description, SCHEMA)


async def test_a_tool_brokerd_no_longer_lists_is_not_offered_on_the_next_turn(
    tmp_path: Path,
) -> None:
    box = Box(tmp_path, Broker((READ, SEND)))
    await box.turn("s", "read my mail")
    box.broker.tools = (READ,)  # send_email changed: brokerd decides it no more
    await box.turn("s", "again")
    assert box.names(-1) == [*BUILT_INS, READ.name]
    assert box.queries() == 2


async def test_a_sub_agent_asks_for_its_own_turn_and_is_offered_them_too(
    tmp_path: Path,
) -> None:
    box = Box(tmp_path, Broker((READ,)))
    with box.sessions.held("sub-p-1") as child:
        child.event(1, OwnerSaid("a task"))
        await box.turns.run(child, 1)
    assert box.names(0) == [*BUILT_INS, READ.name]
    assert box.queries() == 1


async def test_a_brokerd_that_refuses_the_question_leaves_the_built_ins(tmp_path: Path) -> None:
    box = Box(tmp_path, Broker((READ,)))
    box.broker.refuse = Error("x", ErrorCode.BAD_MESSAGE, "brokerd does not take tools_query")
    assert await box.turn("s", "read my mail") == "read: two mails"
    assert box.names(0) == BUILT_INS


async def test_a_brokerd_that_does_not_answer_leaves_the_last_list_and_is_left_quiet_a_while(
    tmp_path: Path,
) -> None:
    box = Box(tmp_path, Broker((READ,)))
    now = [100.0]
    box.turns.brokerd._clock = lambda: now[0]
    await box.turn("s", "read my mail")
    box.broker.gone = True
    assert await box.turn("s", "again") == ""  # the call itself finds brokerd gone
    assert box.names(1) == [*BUILT_INS, READ.name]  # the model was asked, offered the last
    assert box.ends("s")[-2:] == [
        TurnError("brokerd is not reachable, so the turn stops: brokerd (test) did not answer"),
        TurnEnd(EndReason.ERROR),
    ]
    box.broker.gone = False
    box.broker.tools = (READ, SEND)
    now[0] += TOOLS_QUIET_S - 1
    await box.turn("s2", "read my mail")
    assert box.names(-1) == [*BUILT_INS, READ.name]  # not asked while quiet
    now[0] += 2
    await box.turn("s3", "read my mail")
    assert box.names(-1) == [*BUILT_INS, READ.name, SEND.name]
    assert box.queries() == 3  # s, again (unanswered), s3


def test_a_schema_that_is_not_an_object_is_left_out() -> None:
    broken = [OfferedTool("mcp__a__b", "b", "[1]"), OfferedTool("mcp__a__c", "c", "{")]
    assert mcp_tools([*broken, READ]) == [McpTool(READ.name, READ.description, SCHEMA)]


def test_each_api_gets_the_pinned_schema_as_it_is() -> None:
    tool = McpTool(READ.name, READ.description, SCHEMA)
    assert anthropic.tool_list([tool]) == [
        {"name": READ.name, "description": READ.description, "input_schema": SCHEMA}
    ]
    assert openai.tool_list([tool]) == [
        {
            "type": "function",
            "function": {"name": READ.name, "description": READ.description, "parameters": SCHEMA},
        }
    ]
